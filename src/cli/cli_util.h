// Small helpers shared by the subcommands: exit codes, option validators with plain messages,
// engine loading with the common options, checks of model folders and output paths made before
// anything slow starts, token-list parsing, atomic output files.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltafin/engine.h"

namespace deltafin::cli {

// Exit codes of every command (README "Exit codes", `deltafin --help`).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the command ran and failed (model, files, I/O, memory)
inline constexpr int kExitUsage = 2;    // the command line is wrong; nothing was run

// Validators whose messages say what was expected and what was given (CLI11's Range says "Value
// abc not in range" for a word). CLI11 prefixes the option's name.
CLI::Validator IntRange(int64_t min, int64_t max);
CLI::Validator NumberRange(double min, double max);  // any finite number in [min, max]
CLI::Validator OneOf(std::vector<std::string> choices);

// The handler for CLI11's parse errors: one line "error: <command>: <what>", and where to read
// the options (set on the top-level app; subcommands inherit it).
std::string ParseFailureMessage(const CLI::App* app, const CLI::Error& error);

// Options every model-loading command shares.
struct ModelFlags {
  std::string model_dir;
  int64_t context = 0;
  int64_t prefill_chunk = 0;  // 0: the planned wave
  std::string audit = "auto";
  int threads = 0;  // compute threads; 0 = every available CPU
  // Memory and expert streaming (docs/STREAMING.md).
  std::string mem_limit;  // "" = the machine's budget
  std::string experts = "auto";
  std::string expert_cache;  // "" = what the plan leaves
  int io_threads = 8;
  std::string io = "direct";
  std::string lookahead = "layer-output";
  int spine_readahead = 1;
  bool no_verify_reads = false;
  std::string spine = "bf16";  // bf16, or int8: the row-int8 spine (docs/INT8.md)
  bool quiet_plan = false;     // do not print the memory plan at load
  // Speculative decoding: drafts per verify pass the session reserves (set by run, bench decode;
  // no flag here: 0 reserves nothing).
  int max_draft = 0;
  void Add(CLI::App* cmd);
  // Option conflicts visible on the command line alone (--expert-cache with --experts mapped);
  // commands report them as usage errors before touching any file.
  Status CheckFlags() const;
  // Fails unless --model names an existing directory (checked first, so a typo in the path is
  // reported as such rather than as whatever file the command looks for first).
  Status CheckModelDir() const;
  Result<EngineOptions> Options() const;
  // Loads the engine; a stream install gets its expert fetcher (setup/stream_store.h), an
  // unfinished install is refused with the setup command that completes it. --expert-cache with
  // experts that the plan maps (nothing streams, so no cache) is refused before any weight loads.
  Result<std::unique_ptr<Engine>> LoadEngine() const;
};

// Fails unless `path` can be written by a later WriteFileAtomically or fopen("w"): its folder
// exists and is writable and it is not a folder or a read-only file. Commands call it for every
// output path before loading a model, so a typo costs seconds, not a whole generation.
Status CheckOutputPath(const std::string& flag, const std::string& path);

// "1,2, 3" -> {1, 2, 3}; rejects empty lists, junk and values outside int32.
Result<std::vector<int32_t>> ParseTokenList(const std::string& text);

// The prompts `bench prefill` and `plan`'s prefill sample feed: n token ids spread over the whole
// vocabulary, the same for a seed on every machine (splitmix64).
std::vector<int32_t> BenchPromptIds(int64_t n, int64_t vocab, uint64_t seed);

// Writes `bytes` to `path` with io/durable_file.h's WriteFileDurably through "<path>.partial", so
// a failed or killed run never leaves a truncated file where a good one was.
Status WriteFileAtomically(const std::string& path, const void* bytes, size_t size);

// Prints "error: <message>" to stderr and returns kExitFailure.
int Fail(const Status& status);
// Prints "error: <message>" to stderr and returns kExitUsage.
int UsageError(const std::string& message);

}  // namespace deltafin::cli
