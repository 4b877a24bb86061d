#include "cli/cli_util.h"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "base/byte_size.h"
#include "base/log.h"
#include "io/durable_file.h"
#include "setup/installer.h"
#include "setup/stream_store.h"

namespace deltafin::cli {

namespace fs = std::filesystem;

CLI::Validator IntRange(int64_t min, int64_t max) {
  const std::string bounds = std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [min, max, bounds](std::string& input) -> std::string {
        int64_t value = 0;
        const char* end = input.data() + input.size();
        const auto [ptr, ec] = std::from_chars(input.data(), end, value);
        if (input.empty() || ptr != end || ec == std::errc::invalid_argument) {
          return "expected an integer from " + bounds + ", got '" + input + "'";
        }
        if (ec == std::errc::result_out_of_range || value < min || value > max) {
          return "must be from " + bounds + ", got " + input;
        }
        return "";
      },
      "[" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

CLI::Validator NumberRange(double min, double max) {
  char bounds[64], desc[64];
  std::snprintf(bounds, sizeof bounds, "%g to %g", min, max);
  std::snprintf(desc, sizeof desc, "%g, %g", min, max);
  const std::string b_desc = desc;
  return CLI::Validator(
      [min, max, b = std::string(bounds)](std::string& input) -> std::string {
        char* end = nullptr;
        const double value = input.empty() ? 0 : std::strtod(input.c_str(), &end);
        if (input.empty() || end != input.c_str() + input.size() || !std::isfinite(value)) {
          return "expected a number from " + b + ", got '" + input + "'";
        }
        if (value < min || value > max) return "must be from " + b + ", got " + input;
        return "";
      },
      "[" + b_desc + "]");
}

CLI::Validator OneOf(std::vector<std::string> choices) {
  std::string list, brace;
  for (const auto& c : choices) {
    list += (list.empty() ? "" : ", ") + c;
    brace += (brace.empty() ? "" : ",") + c;
  }
  return CLI::Validator(
      [choices = std::move(choices), list](std::string& input) -> std::string {
        for (const auto& c : choices) {
          if (input == c) return "";
        }
        return "expected one of " + list + "; got '" + input + "'";
      },
      "{" + brace + "}");
}

namespace {

// By class, not get_name(): some CLI11 errors carry the command's name there.
template <typename T>
bool IsA(const CLI::Error& error) {
  return dynamic_cast<const T*>(&error) != nullptr;
}

}  // namespace

std::string ParseFailureMessage(const CLI::App* app, const CLI::Error& error) {
  // The command line as far as it was understood, for the message and the help hint.
  std::string command = "deltafin";
  const CLI::App* cmd = app;
  while (!cmd->get_subcommands().empty()) {
    cmd = cmd->get_subcommands().front();
    command += " " + cmd->get_name();
  }
  std::string what = error.what();
  // CLI11's wording, reworded where it reads backwards or names no option.
  const std::string excludes = " excludes ", convert = "Could not convert: ";
  if (const size_t at = what.find(excludes);
      IsA<CLI::ExcludesError>(error) && at != std::string::npos) {
    what = what.substr(0, at) + " and " + what.substr(at + excludes.size()) +
           " cannot be used together";
  } else if (what.rfind(convert, 0) == 0) {
    // "Could not convert: --seed = abc" (an option without a validator of its own).
    const size_t eq = what.find(" = ");
    const std::string name = what.substr(convert.size(), eq - convert.size());
    const std::string value = eq == std::string::npos ? "" : what.substr(eq + 3);
    const CLI::Option* opt = cmd->get_option_no_throw(name);
    // "INT:[0, 64]": the type, then the validators' descriptions.
    const std::string type =
        opt != nullptr ? opt->get_type_name().substr(0, opt->get_type_name().find(':')) : "";
    what = name + ": '" + value + "' is not " +
           (type == "UINT"    ? "a non-negative integer"
            : type == "INT"   ? "an integer"
            : type == "FLOAT" ? "a number"
                              : "a valid value");
  } else if (IsA<CLI::ArgumentMismatch>(error) && what.find(" missing") != std::string::npos) {
    // "--max-new: 1 required INT missing": the option came last, without its value.
    what = what.substr(0, what.find(':')) + " needs a value";
  } else if (IsA<CLI::RequiredError>(error) && cmd == app) {
    what = "give a command";
  } else if (IsA<CLI::ExtrasError>(error)) {
    const size_t colon = what.find(": ");
    what = "unknown option or argument" +
           (colon == std::string::npos ? std::string() : what.substr(colon));
  }
  return "error: " + what + " (`" + command + " --help` lists the options)\n";
}

void ModelFlags::Add(CLI::App* cmd) {
  cmd->add_option("--model", model_dir,
                  "Model directory: a `deltafin setup` install (full or stream) or a Hugging Face "
                  "snapshot folder")
      ->required();
  cmd->add_option("--ctx", context, "Context capacity in tokens (0 = min(model limit, 4096))")
      ->check(IntRange(0, INT32_MAX));
  cmd->add_option("--prefill-chunk", prefill_chunk,
                  "Positions processed together in prefill: N forces fixed chunks of N; 0 or "
                  "absent, the planned wave (as many as the memory plan holds, up to the whole "
                  "context: each expert is then read once per wave)")
      ->check(IntRange(0, 1 << 20));
  cmd->add_option("--audit-scales", audit,
                  "Check every MXFP4 scale byte at load: auto (models with <= 4 GiB of experts), "
                  "on, off")
      ->check(OneOf({"auto", "on", "off"}));
  cmd->add_option("--threads", threads,
                  "Compute threads (0 = $DF_THREADS when set, else every CPU the process may use)")
      ->check(IntRange(0, 4096));
  cmd->add_option("--mem-limit", mem_limit,
                  "RAM the engine may use, e.g. 16G (default: the machine's or its cgroup's limit "
                  "minus headroom)");
  cmd->add_option("--experts", experts,
                  "Routed experts: auto (mapped if the model fits the budget, else streamed), "
                  "mapped, streamed")
      ->check(OneOf({"auto", "mapped", "streamed"}));
  cmd->add_option("--expert-cache", expert_cache,
                  "Streamed experts: RAM cache size, e.g. 2G (default: what the budget leaves)");
  cmd->add_option("--io-threads", io_threads,
                  "Streamed experts and spine: concurrent reads per drive, shared by both (the "
                  "disk queue depth; a spread model's drives have one each)")
      ->check(IntRange(1, 64));
  cmd->add_option("--io", io, "Streamed experts: direct (O_DIRECT / F_NOCACHE) or buffered reads")
      ->check(OneOf({"direct", "buffered"}));
  cmd->add_option("--lookahead", lookahead,
                  "Streamed experts: guess the next layer's experts with its router and read them "
                  "early, from the layer output (default), post-attention, both, or off")
      ->check(OneOf({"layer-output", "post-attention", "both", "off"}));
  cmd->add_option("--spine-readahead", spine_readahead,
                  "A spine that does not fit in RAM: layers read ahead of the one computing "
                  "(default 1; 0 reads each layer when it is needed)")
      ->check(IntRange(0, 15));
  cmd->add_flag("--no-verify-reads", no_verify_reads,
                "Streamed experts: skip the scale-byte check of every expert read");
  cmd->add_option("--spine", spine,
                  "Spine linears: bf16 (weight-exact, default) or int8 (the row-int8 copy written "
                  "by `deltafin convert-spine-int8`; about half the memory, not weight-exact)")
      ->check(OneOf({"bf16", "int8"}));
}

Status ModelFlags::CheckFlags() const {
  if (experts == "mapped" && !expert_cache.empty()) {
    return Status::Error(
        "--expert-cache sizes the RAM cache of streamed experts; with --experts "
        "mapped every expert is mapped and nothing is cached: drop one of them");
  }
  return Status::Ok();
}

Status ModelFlags::CheckModelDir() const {
  std::error_code ec;
  if (fs::is_directory(model_dir, ec)) return Status::Ok();
  const char* what = fs::exists(model_dir, ec) ? "is not a directory" : "no such directory";
  return Status::Error("--model " + model_dir + ": " + what +
                       " (give the folder of a `deltafin setup` install or of a Hugging Face "
                       "snapshot)");
}

Result<EngineOptions> ModelFlags::Options() const {
  EngineOptions options;
  options.model_dir = model_dir;
  options.context_capacity = context;
  options.prefill_chunk = prefill_chunk;
  options.threads = threads;
  options.audit_expert_scales = audit == "on"    ? EngineOptions::ScaleAudit::kOn
                                : audit == "off" ? EngineOptions::ScaleAudit::kOff
                                                 : EngineOptions::ScaleAudit::kAuto;
  if (!mem_limit.empty()) {
    DF_ASSIGN_OR_RETURN(options.mem_limit, ParseByteSize(mem_limit));
  }
  if (!expert_cache.empty()) {
    DF_ASSIGN_OR_RETURN(options.expert_cache_bytes, ParseByteSize(expert_cache));
  }
  options.experts = experts == "mapped"     ? EngineOptions::Experts::kMapped
                    : experts == "streamed" ? EngineOptions::Experts::kStreamed
                                            : EngineOptions::Experts::kAuto;
  options.io_threads = io_threads;
  options.direct_io = io == "direct";
  options.lookahead = lookahead == "off"              ? EngineOptions::Lookahead::kOff
                      : lookahead == "post-attention" ? EngineOptions::Lookahead::kPostAttention
                      : lookahead == "both"           ? EngineOptions::Lookahead::kBoth
                                                      : EngineOptions::Lookahead::kLayerOutput;
  options.verify_expert_reads = !no_verify_reads;
  options.spine_readahead = spine_readahead;
  options.spine_int8 = spine == "int8";
  options.max_draft = max_draft;
  return options;
}

Result<std::unique_ptr<Engine>> ModelFlags::LoadEngine() const {
  DF_RETURN_IF_ERROR(CheckFlags());
  DF_RETURN_IF_ERROR(CheckModelDir());
  DF_ASSIGN_OR_RETURN(EngineOptions options, Options());
  // A stream install (deltafin setup --stream) fetches missing experts on first use.
  DF_ASSIGN_OR_RETURN(setup::InstallKind kind, setup::InspectInstall(model_dir));
  if (kind == setup::InstallKind::kStream) {
    DF_ASSIGN_OR_RETURN(options.expert_fetcher, setup::StreamStore::Open(model_dir, {}));
  }
  if (!expert_cache.empty()) {  // a cache size only means something if experts stream
    DF_ASSIGN_OR_RETURN(ModelInfo plan, Engine::Plan(options));
    if (!plan.experts_streamed) {
      return Status::Error("--expert-cache " + expert_cache +
                           ": this model's experts are all mapped (they fit the memory budget), "
                           "so there is no expert cache; add --experts streamed to stream them "
                           "through a cache of that size");
    }
  }
  DF_ASSIGN_OR_RETURN(auto engine, Engine::Load(options));
  if (!quiet_plan) LogInfo(engine->info().memory_plan);
  return engine;
}

Result<std::vector<int32_t>> ParseTokenList(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || value < 0 ||
        value > INT32_MAX) {
      return Status::Error("token list: '" + item + "' is not a token id (expected e.g. 1,2,3)");
    }
    ids.push_back(static_cast<int32_t>(value));
    pos = comma + 1;
  }
  return ids;
}

Status WriteFileAtomically(const std::string& path, const void* bytes, size_t size) {
  DurableWriteOptions options;
  options.temp_suffix = ".partial";
  return WriteFileDurably(path, bytes, size, options);
}

Status CheckOutputPath(const std::string& flag, const std::string& path) {
  const std::string what = flag + " " + path + ": ";
  std::error_code ec;
  if (path.empty()) return Status::Error(flag + ": the path is empty");
  if (fs::is_directory(path, ec)) return Status::Error(what + "is a directory; give a file name");
  const fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : ".";
  if (!fs::is_directory(dir, ec)) {
    return Status::Error(what + "the folder " + dir.string() + " does not exist");
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Status::Error(what + "cannot write in " + dir.string() + ": " + std::strerror(errno));
  }
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0) {
    return Status::Error(what + "cannot overwrite it: " + std::strerror(errno));
  }
  return Status::Ok();
}

int Fail(const Status& status) {
  LogError(status.message());
  return kExitFailure;
}

int UsageError(const std::string& message) {
  LogError(message);
  return kExitUsage;
}

std::vector<int32_t> BenchPromptIds(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t x = seed;
  for (auto& id : ids) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    id = static_cast<int32_t>(z % static_cast<uint64_t>(vocab));
  }
  return ids;
}

}  // namespace deltafin::cli
