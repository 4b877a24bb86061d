// Small helpers shared by the subcommands: token-list parsing, engine loading with the common
// options, atomic output files.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltafin/engine.h"

namespace deltafin::cli {

// Options every model-loading command shares.
struct ModelFlags {
  std::string model_dir;
  int64_t context = 0;
  int64_t prefill_chunk = 32;
  std::string audit = "auto";
  int threads = 0;  // compute threads; 0 = every available CPU
  // Memory and expert streaming (docs/STREAMING.md).
  std::string mem_limit;  // "" = the machine's budget
  std::string experts = "auto";
  std::string expert_cache;  // "" = what the plan leaves
  int io_threads = 8;
  std::string io = "direct";
  std::string lookahead = "layer-output";
  bool no_verify_reads = false;
  std::string spine = "bf16";  // bf16, or int8: the row-int8 spine (docs/INT8.md)
  bool quiet_plan = false;     // do not print the memory plan at load
  void Add(CLI::App* cmd);
  Result<EngineOptions> Options() const;
  // Loads the engine; a stream install gets its expert fetcher (setup/stream_store.h), an
  // unfinished install is refused with the setup command that completes it.
  Result<std::unique_ptr<Engine>> LoadEngine() const;
};

// "1,2, 3" -> {1, 2, 3}; rejects empty lists, junk and values outside int32.
Result<std::vector<int32_t>> ParseTokenList(const std::string& text);

// Writes `bytes` to `path` via a temporary file and rename, so a failed run never leaves a
// truncated file where a good one was.
Status WriteFileAtomically(const std::string& path, const void* bytes, size_t size);

// Prints "error: <message>" to stderr and returns the exit code 1.
int Fail(const Status& status);

}  // namespace deltafin::cli
