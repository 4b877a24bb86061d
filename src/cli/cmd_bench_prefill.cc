// `deltafin bench prefill`: time to prefill a long prompt against its floor, per the scenarios of
// docs/PERFORMANCE.md "Benchmark definitions", under the same memory cgroups as `bench decode`
// (cli/bench_child.h).
//
// The child loads the engine under the limit, measures the disk with the engine's own probe
// (streamed scenarios) and the fp32 multiply-add peak (bench/machine_probe.h) in the same run,
// then prefills a prompt of deterministic token ids spread over the vocabulary (seeded), in the
// engine's planned waves or in fixed --prefill-chunk chunks. The floor is
//   max(bytes that must be read / disk bandwidth, FLOPs / multiply-add peak)
// where the bytes that must be read are the distinct experts each wave needed (each counted once
// per wave: expert_bytes_floor) plus a streamed spine's bytes once per wave, and the FLOPs are
// PrefillFlops (the config's arithmetic of the prompt, deltafin/engine.h). The report adds the
// engine's byte counts against /proc/self/io and the op-family breakdown (SessionStats).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/log.h"
#include "bench/machine_probe.h"
#include "cli/bench_child.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/token_stats.h"
#include "deltafin/generator.h"
#include "report/svg.h"

namespace deltafin::cli {

namespace {

struct PrefillBenchArgs {
  ModelFlags model;
  std::string scenario = "stream-spine-resident";
  int64_t prompt_tokens = 2048;
  uint64_t seed = 1;
  int64_t probe_experts = 0;  // 0: about 1 GiB of experts (at least 256, at most 4096)
  bool no_memory_limit = false;
  std::string json_path;
  std::string svg_path;
};

Result<nlohmann::json> MeasurePrefill(const PrefillBenchArgs& a, const EngineOptions& options) {
  DF_ASSIGN_OR_RETURN(auto engine, Engine::Load(options));
  const ModelInfo& info = engine->info();
  LogInfo(info.memory_plan);
  if (a.prompt_tokens > info.context_capacity) {
    return Status::Error("--prompt-tokens " + std::to_string(a.prompt_tokens) +
                         " exceeds the context capacity of " +
                         std::to_string(info.context_capacity) + " (raise --ctx)");
  }
  int64_t probe = a.probe_experts;
  if (probe <= 0) {
    probe = std::clamp<int64_t>(static_cast<int64_t>((1ull << 30) / info.expert_bytes), 256, 4096);
  }
  double disk_bps = 0;
  std::string disk_pattern;
  if (info.experts_streamed) {
    const auto seed =
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    DF_ASSIGN_OR_RETURN(const DiskProbe p, engine->ProbeDiskBandwidth(probe, seed));
    disk_bps = p.bytes_per_second;
    disk_pattern = p.pattern;
    char line[320];
    std::snprintf(line, sizeof line, "disk: %.3f GB/s over %s (%s, %d threads)", disk_bps / 1e9,
                  p.pattern.c_str(), info.expert_read_mode, options.io_threads);
    LogInfo(line);
  }
  const double fma_per_s = bench::MeasureFmaPeak(false);
  const double peak_flops = 2 * fma_per_s;
  {
    char line[160];
    std::snprintf(line, sizeof line, "fp32 multiply-add peak: %.1f GFLOP/s", peak_flops / 1e9);
    LogInfo(line);
  }
  const std::vector<int32_t> prompt = BenchPromptIds(a.prompt_tokens, info.vocab_size, a.seed);
  auto session = engine->NewSession();
  if (!info.experts_streamed) {
    // All in RAM: a first pass brings the mapped weights into memory.
    DF_RETURN_IF_ERROR(session->Prefill(prompt));
    session->Reset();
  }
  int64_t waves = 0;
  const SessionStats before = session->stats();
  const uint64_t proc_before = ProcReadBytes();
  const auto t0 = std::chrono::steady_clock::now();
  const auto progress = [&](int64_t done, int64_t total) {
    ++waves;
    LogInfo("prefill wave " + std::to_string(waves) + ": " + std::to_string(done) + "/" +
            std::to_string(total) + " positions");
  };
  DF_RETURN_IF_ERROR(session->Prefill(prompt, {}, progress));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const uint64_t proc_read = ProcReadBytes() - proc_before;
  const SessionStats d = StatsSince(session->stats(), before);

  const uint64_t expert_floor = d.expert_loads * info.expert_bytes;
  // Bytes that must come from disk: the distinct experts of each wave (streamed experts), and a
  // streamed spine's streamed layers once per wave. A resident spine was read at load.
  const uint64_t must_read =
      (info.experts_streamed ? expert_floor : 0) +
      static_cast<uint64_t>(waves) * (info.spine_resident ? 0 : info.spine_streamed_bytes);
  const double read_floor_s = disk_bps > 0 ? static_cast<double>(must_read) / disk_bps : 0.0;
  const double flops = PrefillFlops(info, 0, a.prompt_tokens, 1);
  const double compute_floor_s = peak_flops > 0 ? flops / peak_flops : 0.0;
  const double floor_s = std::max(read_floor_s, compute_floor_s);
  nlohmann::json ops = nlohmann::json::object();
  double ops_sum = 0;
  for (size_t f = 0; f < kOpFamilyCount; ++f) {
    ops[OpFamilyName(static_cast<OpFamily>(f))] = d.op_seconds[f];
    ops_sum += d.op_seconds[f];
  }
  return nlohmann::json{
      {"scenario", a.scenario},
      {"model", info.model_dir},
      {"prompt_tokens", a.prompt_tokens},
      {"seconds", seconds},
      {"tokens_per_s", seconds > 0 ? static_cast<double>(a.prompt_tokens) / seconds : 0.0},
      {"waves", waves},
      {"wave_tokens", info.prefill_wave},
      {"wave_fixed", info.prefill_wave_fixed},
      {"expert_loads", d.expert_loads},
      {"expert_bytes_read", d.expert_bytes_read},
      {"expert_bytes_floor", expert_floor},
      // What had to come from disk for them: experts not in RAM before their wave, as the
      // direct reads transfer them (whole 4 KiB blocks).
      {"expert_bytes_needed", d.expert_bytes_needed},
      {"expert_read_ratio",
       expert_floor > 0 ? static_cast<double>(d.expert_bytes_read) / expert_floor : 0.0},
      {"spine_bytes_read", d.spine_bytes_read},
      {"must_read_bytes", must_read},
      {"disk_gbps", disk_bps / 1e9},
      {"disk_probe", disk_pattern},
      {"fma_gflops", peak_flops / 1e9},
      {"flops", flops},
      {"achieved_gflops", seconds > 0 ? flops / seconds / 1e9 : 0.0},
      {"read_floor_s", read_floor_s},
      {"compute_floor_s", compute_floor_s},
      {"floor_s", floor_s},
      {"floor_ratio", floor_s > 0 ? seconds / floor_s : 0.0},
      {"proc_read_bytes", proc_read},
      {"engine_read_bytes", d.expert_bytes_read + d.spine_bytes_read},
      {"io_wait_s", d.io_wait_seconds},
      {"ops", ops},
      {"ops_sum_s", ops_sum},
      {"experts_streamed", info.experts_streamed},
      {"expert_read_mode", info.expert_read_mode},
      {"expert_cache_bytes", info.expert_cache_bytes},
      {"memory_budget", info.memory_budget},
      {"spine_resident", info.spine_resident},
      {"spine", info.spine_int8 ? "int8" : "bf16"},
      {"io_threads", options.io_threads},
  };
}

// `--svg`: the prefill's time by op family (I/O waits at the bottom) as one stacked bar, with
// its floor as a black mark.
std::string PrefillSvg(const nlohmann::json& j) {
  report::StackedBars bars;
  bars.id = "prefill";
  char title[240];
  std::snprintf(
      title, sizeof title, "bench prefill %s: %lld tokens in %lld wave(s), %.4g s (floor %.4g s)",
      j.value("scenario", "").c_str(), static_cast<long long>(j.value("prompt_tokens", 0)),
      static_cast<long long>(j.value("waves", 0)), j.value("seconds", 0.0),
      j.value("floor_s", 0.0));
  bars.title = title;
  bars.y_label = "seconds";
  bars.x_label = "floor = max(bytes that must be read / disk bandwidth, FLOPs / fp32 FMA peak)";
  bars.mark_label = "floor";
  std::vector<OpFamily> order = {OpFamily::kExpertIoWait, OpFamily::kSpineIoWait};
  for (size_t f = 0; f < kOpFamilyCount; ++f) {
    const auto family = static_cast<OpFamily>(f);
    if (family != OpFamily::kExpertIoWait && family != OpFamily::kSpineIoWait) {
      order.push_back(family);
    }
  }
  std::vector<double> values;
  for (OpFamily f : order) {
    bars.series.emplace_back(OpFamilyName(f));
    values.push_back(j.at("ops").value(OpFamilyName(f), 0.0));
  }
  bars.values.push_back(std::move(values));
  bars.marks.push_back(j.value("floor_s", -1.0));
  bars.bar_labels.push_back(std::to_string(j.value("prompt_tokens", 0)) + " tokens");
  report::Svg svg(900, 520);
  report::DrawStackedBars(svg, bars, {0, 0, 900, 520});
  return svg.Finish();
}

void PrintReport(const nlohmann::json& j) {
  std::printf("| field | value |\n|---|---|\n");
  for (const auto& [key, v] : j.items()) {
    if (key == "ops") continue;
    if (v.is_number_float()) {
      std::printf("| %s | %.4g |\n", key.c_str(), v.get<double>());
    } else {
      std::printf("| %s | %s |\n", key.c_str(),
                  v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
    }
  }
  for (const auto& [family, seconds] : j["ops"].items()) {
    std::printf("| ops: %s s | %.4g |\n", family.c_str(), seconds.get<double>());
  }
}

int RunPrefillBench(const PrefillBenchArgs& a) {
  for (const auto& [flag, path] : {std::pair{"--json", a.json_path}, {"--svg", a.svg_path}}) {
    if (path.empty()) continue;
    if (Status st = CheckOutputPath(flag, path); !st.ok()) return Fail(st);
  }
  auto base = a.model.Options();
  if (!base.ok()) return Fail(base.status());
  EngineOptions options = *base;
  auto limit = ApplyBenchScenario(a.scenario, &options);
  if (!limit.ok()) return Fail(limit.status());
  nlohmann::json j;
  if (int rc = RunMeasuredChild(
          *limit, a.no_memory_limit, [&] { return MeasurePrefill(a, options); }, &j);
      rc != 0) {
    return rc;
  }
  PrintReport(j);
  if (!a.json_path.empty()) {
    const std::string text = j.dump(1) + "\n";
    if (Status st = WriteFileAtomically(a.json_path, text.data(), text.size()); !st.ok()) {
      return Fail(st);
    }
  }
  if (!a.svg_path.empty()) {
    const std::string text = PrefillSvg(j);
    if (Status st = WriteFileAtomically(a.svg_path, text.data(), text.size()); !st.ok()) {
      return Fail(st);
    }
  }
  return 0;
}

}  // namespace

void RegisterBenchPrefill(CLI::App* bench, int* exit_code) {
  auto args = std::make_shared<PrefillBenchArgs>();
  CLI::App* cmd = bench->add_subcommand(
      "prefill",
      "Prefill seconds of a long prompt against the floor (bytes that must be read / measured "
      "disk bandwidth, or FLOPs / measured multiply-add peak), under a real memory limit");
  args->model.Add(cmd);
  args->model.quiet_plan = true;
  AddBenchScenarioOption(cmd, &args->scenario);
  cmd->add_option("--prompt-tokens", args->prompt_tokens,
                  "Prompt length (token ids spread over the vocabulary)")
      ->check(IntRange(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the prompt's token ids")->capture_default_str();
  cmd->add_option("--probe-experts", args->probe_experts,
                  "Expert reads for the disk measurement (0 = about 1 GiB)");
  cmd->add_flag("--no-memory-limit", args->no_memory_limit,
                "Do not create a memory cgroup (numbers are then not trustworthy)");
  cmd->add_option("--json", args->json_path, "Also write the report as JSON");
  cmd->add_option("--svg", args->svg_path,
                  "Also draw the prefill's time by op family, with its floor, as a plain SVG");
  cmd->callback([args, exit_code] { *exit_code = RunPrefillBench(*args); });
}

}  // namespace deltafin::cli
