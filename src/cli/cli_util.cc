#include "cli/cli_util.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "base/log.h"
#include "experts/memory_plan.h"
#include "setup/installer.h"
#include "setup/stream_store.h"

namespace deltafin::cli {

void ModelFlags::Add(CLI::App* cmd) {
  cmd->add_option("--model", model_dir,
                  "Model directory: a `deltafin setup` install (full or stream) or a Hugging Face "
                  "snapshot folder")
      ->required();
  cmd->add_option("--ctx", context, "Context capacity in tokens (0 = min(model limit, 4096))");
  cmd->add_option("--prefill-chunk", prefill_chunk, "Positions processed together in prefill")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--audit-scales", audit,
                  "Check every MXFP4 scale byte at load: auto (models with <= 4 GiB of experts), "
                  "on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  cmd->add_option("--threads", threads, "Compute threads (0 = every available CPU)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--mem-limit", mem_limit,
                  "RAM the engine may use, e.g. 16G (default: the machine's or its cgroup's limit "
                  "minus headroom)");
  cmd->add_option("--experts", experts,
                  "Routed experts: auto (mapped if the model fits the budget, else streamed), "
                  "mapped, streamed")
      ->check(CLI::IsMember({"auto", "mapped", "streamed"}));
  cmd->add_option("--expert-cache", expert_cache,
                  "Streamed experts: RAM cache size, e.g. 2G (default: what the budget leaves)");
  cmd->add_option("--io-threads", io_threads, "Streamed experts: concurrent reads (queue depth)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--io", io, "Streamed experts: direct (O_DIRECT / F_NOCACHE) or buffered reads")
      ->check(CLI::IsMember({"direct", "buffered"}));
  cmd->add_option("--lookahead", lookahead,
                  "Streamed experts: guess the next layer's experts with its router and read them "
                  "early, from the layer output (default), post-attention, both, or off")
      ->check(CLI::IsMember({"layer-output", "post-attention", "both", "off"}));
  cmd->add_flag("--no-verify-reads", no_verify_reads,
                "Streamed experts: skip the scale-byte check of every expert read");
  cmd->add_option("--spine", spine,
                  "Spine linears: bf16 (weight-exact, default) or int8 (the row-int8 copy written "
                  "by `deltafin convert-spine-int8`; about half the memory, not weight-exact)")
      ->check(CLI::IsMember({"bf16", "int8"}));
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
  options.spine_int8 = spine == "int8";
  return options;
}

Result<std::unique_ptr<Engine>> ModelFlags::LoadEngine() const {
  DF_ASSIGN_OR_RETURN(EngineOptions options, Options());
  // A stream install (deltafin setup --stream) fetches missing experts on first use.
  DF_ASSIGN_OR_RETURN(setup::InstallKind kind, setup::InspectInstall(model_dir));
  if (kind == setup::InstallKind::kStream) {
    DF_ASSIGN_OR_RETURN(options.expert_fetcher, setup::StreamStore::Open(model_dir, {}));
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
  const std::string tmp = path + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::Error(tmp + ": cannot create: " + std::strerror(errno));
  const bool wrote = std::fwrite(bytes, 1, size, f) == size;
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) {
    std::remove(tmp.c_str());
    return Status::Error(path + ": write failed: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::Error(path + ": cannot rename into place: " + std::strerror(errno));
  }
  return Status::Ok();
}

int Fail(const Status& status) {
  LogError(status.message());
  return 1;
}

}  // namespace deltafin::cli
