// `deltafin bench decode`: decode speed against the physical floor, per the scenarios of
// docs/PERFORMANCE.md "Benchmark definitions", under a real memory limit.
//
// The parent process works out the scenario's RAM budget from the model's plan, creates a memory
// cgroup with that limit, drops the page cache, and forks (cli/bench_child.h); the child joins the
// cgroup before it loads anything, measures the disk with the decode access pattern (random
// whole-expert reads; with a streamed spine, one step's ring chunks and experts in pass order:
// weights/read_probe.h; same I/O threads and mode) on the model's own shards, then prefills a fixed
// prompt and decodes through the decode driver (deltafin/generator.h). Per step it records wall
// time, the engine's byte and time counters and /proc/self/io read_bytes. The report: median
// seconds per token over the steps after the first, bytes per token, the measured disk bandwidth,
// the floor = max(disk bytes per token / bandwidth, compute seconds per token), and the floor ratio
// = s/token / floor; the mean op-family breakdown per token and every step's numbers (--json), and
// stacked bars of each step's breakdown with its floor (--svg). The parent adds the cgroup's peak
// memory use.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "base/byte_size.h"
#include "base/log.h"
#include "cli/bench_child.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/token_stats.h"
#include "deltafin/generator.h"
#include "deltafin/speculate.h"
#include "report/svg.h"

namespace deltafin::cli {

namespace {

struct DecodeBenchArgs {
  ModelFlags model;
  std::string scenario = "stream-spine-resident";
  int64_t steps = 17;  // decode steps; the first is not counted in the median
  int64_t prompt_tokens = 8;
  int64_t probe_experts = 0;  // 0: about 1 GiB of experts (at least 256, at most 4096)
  bool no_memory_limit = false;
  std::string json_path;
  std::string svg_path;
  std::string speculate = "off";  // off | ngram | replay (docs/SPECULATION.md)
  int draft_max = 8;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// A bench generation as the decode driver runs it: its tokens, the disk bytes its passes needed,
// and, with `steps`, every decode step's numbers (the first token's step, which needs no pass, is
// not one), logged as it ends. A step's seconds are its pass's (the forward pass and commit).
class BenchRecorder final : public GenerationCallbacks {
 public:
  BenchRecorder(const DeviceBusyClock* device, double disk_bps, std::vector<StepStats>* steps)
      : meter_(device), disk_bps_(disk_bps), steps_(steps) {}
  void OnStepStart() override { meter_.Start(); }
  void OnStep(const GenerationStep& step) override {
    if (step.index == 0) return;
    disk_bytes += step.delta.expert_bytes_needed + step.delta.spine_bytes_read;
    if (steps_ == nullptr) return;
    const StepStats stats = meter_.Finish(step.delta, step.pass.seconds, step.position - 1);
    LogInfo("decode " + FormatStep(stats, disk_bps_));
    steps_->push_back(stats);
  }
  bool OnToken(int32_t token, std::span<const float> /*logits*/) override {
    tokens.push_back(token);
    return true;
  }
  std::vector<int32_t> tokens;
  uint64_t disk_bytes = 0;

 private:
  StepMeter meter_;
  double disk_bps_;
  std::vector<StepStats>* steps_;
};

// The child: loads the engine under the limit, measures the disk, decodes, writes JSON.
Result<nlohmann::json> MeasureDecode(const DecodeBenchArgs& a, const EngineOptions& options) {
  DF_ASSIGN_OR_RETURN(auto engine, Engine::Load(options));
  const ModelInfo& info = engine->info();
  LogInfo(info.memory_plan);
  // The disk is measured just before and just after decoding (this kind of virtual disk swings
  // by 2x within minutes); the floor uses the faster of the two, which can only raise the ratio.
  int64_t probe = a.probe_experts;
  if (probe <= 0) {
    probe = std::clamp<int64_t>(static_cast<int64_t>((1ull << 30) / info.expert_bytes), 256, 4096);
  }
  // With a streamed spine the engine's probe reads one decode step's spine chunks and experts:
  // this disk gives the two patterns different rates (docs/PERFORMANCE.md, 2026-12-04).
  std::string probe_pattern;
  auto measure_disk = [&](uint64_t seed, const char* when) -> Result<double> {
    DF_ASSIGN_OR_RETURN(const DiskProbe p, engine->ProbeDiskBandwidth(probe, seed));
    probe_pattern = p.pattern;
    char line[320];
    std::snprintf(line, sizeof line, "disk %s: %.3f GB/s over %s (%s, %d threads)", when,
                  p.bytes_per_second / 1e9, p.pattern.c_str(), info.expert_read_mode,
                  options.io_threads);
    LogInfo(line);
    return p.bytes_per_second;
  };
  // A new draw of spans every run: a virtual disk's host may cache what an earlier run read.
  const auto seed =
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  double disk_before = 0, disk_after = 0;
  if (info.experts_streamed) {
    DF_ASSIGN_OR_RETURN(disk_before, measure_disk(seed, "before"));
  }
  auto session = engine->NewSession();
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < a.prompt_tokens; ++i) {
    prompt.push_back(static_cast<int32_t>((1 + 7919 * i) % info.vocab_size));
  }
  // The device's busy time counts every process's I/O on it: a neighbour's reads raise it.
  const DeviceBusyClock device_clock(info.model_dir + "/config.json");
  // One greedy generation of `steps` decode steps (or tokens, when speculating) by the decode
  // driver, from a fresh prefill of the prompt.
  auto generate = [&](Generator& generator, int64_t tokens, BenchRecorder& recorder) -> Status {
    session->Reset();
    DF_RETURN_IF_ERROR(session->Prefill(prompt));
    const GenerationResult r = generator.Generate(prompt, {.max_tokens = tokens}, recorder);
    if (r.reason == FinishReason::kContext) {
      return Status::Error("the context cannot hold --prompt-tokens plus --steps");
    }
    return r.reason == FinishReason::kError ? r.status : Status::Ok();
  };
  // The baseline: plain decoding. The first token comes from the prompt's logits; the `steps`
  // after it are the decode steps. The greedy tokens they fed are the continuation replay offers.
  Generator plain(session.get(), info, {});
  if (a.scenario == "resident") {  // a first run warms the caches up
    BenchRecorder warm_up(nullptr, 0, nullptr);
    DF_RETURN_IF_ERROR(generate(plain, a.steps + 1, warm_up));
  }
  std::vector<StepStats> steps;
  BenchRecorder baseline(&device_clock, disk_before, &steps);
  DF_RETURN_IF_ERROR(generate(plain, a.steps + 1, baseline));
  const std::vector<int32_t> continuation(baseline.tokens.begin(), baseline.tokens.end() - 1);

  // Speculation, measured in the same run as the baseline above: `steps` greedy tokens per run,
  // s/token = the passes' wall time / the tokens they produced (the first token, from the
  // prompt's logits, is not counted), bytes per token the same way.
  auto speculative_pass = [&](std::shared_ptr<Drafter> drafter, int64_t k,
                              bool adaptive) -> Result<nlohmann::json> {
    GeneratorOptions speculating;
    speculating.drafter = std::move(drafter);
    speculating.speculate.draft_max = k;
    speculating.speculate.adaptive = adaptive;
    Generator generator(session.get(), info, std::move(speculating));
    BenchRecorder recorder(nullptr, 0, nullptr);
    DF_RETURN_IF_ERROR(generate(generator, a.steps, recorder));
    if (recorder.tokens != continuation) {
      return Status::Error(
          "speculative greedy tokens differ from plain decoding (k = " + std::to_string(k) + ")");
    }
    const SpeculativeTotals& t = generator.totals();
    LogInfo("speculate k=" + std::to_string(k) + ": " + FormatSpeculation(t));
    return nlohmann::json{
        {"k", k},
        {"s_per_token", t.seconds_per_token()},
        {"tokens_per_pass", t.tokens_per_pass()},
        {"bytes_per_token", t.tokens > 0 ? double(recorder.disk_bytes) / double(t.tokens) : 0},
        {"acceptance", t.acceptance()}};
  };
  nlohmann::json replay = nlohmann::json::array(), ngram_run;
  if (a.speculate == "replay") {
    auto drafter =
        std::make_shared<ReplayDrafter>(continuation, static_cast<int64_t>(prompt.size()));
    for (int64_t k : {1, 2, 4, 8}) {
      if (k > a.draft_max) break;
      DF_ASSIGN_OR_RETURN(nlohmann::json r, speculative_pass(drafter, k, false));
      replay.push_back(std::move(r));
    }
  } else if (a.speculate == "ngram") {
    DF_ASSIGN_OR_RETURN(ngram_run,
                        speculative_pass(std::make_shared<NgramDrafter>(), a.draft_max, true));
  }
  if (info.experts_streamed) {
    DF_ASSIGN_OR_RETURN(disk_after, measure_disk(seed + 1, "after"));
  }
  const double disk_bps = std::max(disk_before, disk_after);
  nlohmann::json step_docs = nlohmann::json::array();
  std::array<double, kOpFamilyCount> ops{};
  for (size_t i = 0; i < steps.size(); ++i) {
    nlohmann::json sj = StepJson(steps[i], disk_bps);
    sj["counted"] = i > 0;
    step_docs.push_back(std::move(sj));
    if (i == 0) continue;
    for (size_t f = 0; f < kOpFamilyCount; ++f) ops[f] += steps[i].delta.op_seconds[f];
  }
  nlohmann::json ops_per_token = nlohmann::json::object();
  double ops_sum = 0;
  for (size_t f = 0; f < kOpFamilyCount; ++f) {
    const double per_token = steps.size() > 1 ? ops[f] / static_cast<double>(steps.size() - 1) : 0;
    ops_per_token[OpFamilyName(static_cast<OpFamily>(f))] = per_token;
    ops_sum += per_token;
  }
  std::vector<double> secs, compute, expert_b, needed_b, spine_b, ring_b, proc_b, hits, loads,
      pf_hits, faults;
  double busy_s = 0, wall_s = 0;
  for (size_t i = 1; i < steps.size(); ++i) {  // the first step is not counted
    const StepStats& s = steps[i];
    secs.push_back(s.seconds);
    compute.push_back(s.delta.compute_seconds);
    expert_b.push_back(static_cast<double>(s.delta.expert_bytes_read));
    needed_b.push_back(static_cast<double>(s.delta.expert_bytes_needed));
    spine_b.push_back(static_cast<double>(s.SpineBytes()));
    ring_b.push_back(static_cast<double>(s.delta.spine_bytes_read));
    proc_b.push_back(static_cast<double>(s.proc_read_bytes));
    faults.push_back(static_cast<double>(s.major_faults));
    busy_s += static_cast<double>(s.device_busy_ms) / 1e3;
    wall_s += s.seconds;
    hits.push_back(static_cast<double>(s.delta.expert_cache_hits));
    loads.push_back(static_cast<double>(s.delta.expert_loads));
    pf_hits.push_back(static_cast<double>(s.delta.prefetch_hits));
  }
  const double s_per_token = Median(secs), compute_s = Median(compute);
  // The floor counts what had to come from disk: needed expert bytes (wasted guesses excluded)
  // and the spine bytes the kernel read.
  const double disk_bytes = Mean(needed_b) + Mean(spine_b);
  const double io_floor_s = disk_bps > 0 ? disk_bytes / disk_bps : 0.0;
  const double floor_s = std::max(io_floor_s, compute_s);
  nlohmann::json j = {
      {"scenario", a.scenario},
      {"model", info.model_dir},
      {"tokens", static_cast<int64_t>(secs.size())},
      {"s_per_token", s_per_token},
      {"expert_bytes_per_token", Mean(expert_b)},
      {"expert_bytes_needed_per_token", Mean(needed_b)},
      {"spine_bytes_per_token", Mean(spine_b)},
      {"proc_read_bytes_per_token", Mean(proc_b)},
      {"disk_gbps", disk_bps / 1e9},
      {"disk_gbps_before", disk_before / 1e9},
      {"disk_gbps_after", disk_after / 1e9},
      {"disk_probe", probe_pattern},
      {"compute_s_per_token", compute_s},
      {"floor_s", floor_s},
      {"floor_ratio", floor_s > 0 ? s_per_token / floor_s : 0.0},
      // The disk term alone: bytes that had to be read (streamed spine plus expert misses) over
      // the disk bandwidth, and s/token over it.
      {"read_floor_s", io_floor_s},
      {"io_floor_ratio", io_floor_s > 0 ? s_per_token / io_floor_s : 0.0},
      // The engine's own counts: what the spine ring read (0 with a resident spine) and every
      // byte it read, to hold against the kernel's proc_read_bytes_per_token.
      {"spine_streamed_bytes_per_token", Mean(ring_b)},
      {"engine_read_bytes_per_token", Mean(expert_b) + Mean(ring_b)},
      {"major_faults_per_token", Mean(faults)},
      // Share of the counted steps' wall time the model's block device had I/O in flight (null
      // where the kernel does not report it for the model's filesystem). Near 1 in a disk-bound
      // scenario: the disk never waited for the engine.
      {"disk_busy_fraction", device_clock.available() && wall_s > 0
                                 ? nlohmann::json(std::min(1.0, busy_s / wall_s))
                                 : nlohmann::json(nullptr)},
      {"disk_device", device_clock.available() ? device_clock.device() : std::string()},
      {"expert_cache_hit_rate", Mean(loads) > 0 ? Mean(hits) / Mean(loads) : 0.0},
      {"prefetch_hits_per_token", Mean(pf_hits)},
      {"expert_loads_per_token", Mean(loads)},
      {"experts_streamed", info.experts_streamed},
      {"expert_read_mode", info.expert_read_mode},
      {"expert_cache_bytes", info.expert_cache_bytes},
      {"memory_budget", info.memory_budget},
      {"spine_bytes", info.spine_bytes},
      {"spine_resident_bytes", info.spine_resident ? info.spine_bytes : info.spine_pinned_bytes},
      {"spine_ring_depth", info.spine_ring_depth},
      {"spine", info.spine_int8 ? "int8" : "bf16"},
      {"io_threads", options.io_threads},
      {"lookahead", a.model.lookahead},
      // Mean seconds per counted token by op family (docs/BREAKDOWN.md); they sum to
      // ops_sum_s_per_token, the mean forward-pass wall time (s_per_token is a median).
      {"ops_s_per_token", ops_per_token},
      {"ops_sum_s_per_token", ops_sum},
      {"steps", step_docs},
      // Per drive of a spread model (docs/STREAMING.md "Several drives"), over the whole run
      // (the bandwidth probes excluded); empty otherwise.
      {"drives", DrivesJson(engine->DriveStatistics())},
      {"speculate", a.speculate},
      {"draft_max", a.draft_max},
  };
  if (a.speculate == "replay") {
    j["replay"] = replay;
    j["tokens_per_pass"] = replay.empty() ? 1.0 : replay.back().value("tokens_per_pass", 1.0);
  } else if (a.speculate == "ngram") {
    j["speculate_s_per_token"] = ngram_run["s_per_token"];
    j["tokens_per_pass"] = ngram_run["tokens_per_pass"];
    j["acceptance"] = ngram_run["acceptance"];
  } else {
    j["tokens_per_pass"] = 1.0;
  }
  return j;
}

// `--svg`: one stacked bar per decode step (the uncounted first one included, labelled), its
// op families with the I/O waits at the bottom, and the step's floor as a black mark.
std::string DecodeSvg(const nlohmann::json& j) {
  report::StackedBars bars;
  bars.id = "decode-steps";
  char title[200];
  std::snprintf(title, sizeof title,
                "bench decode %s: time per token by op family (median %.4g s, floor %.4g s)",
                j.value("scenario", "").c_str(), j.value("s_per_token", 0.0),
                j.value("floor_s", 0.0));
  bars.title = title;
  bars.y_label = "seconds";
  bars.x_label =
      "decode step (position; * = first step, not in the median); floor = max(needed disk bytes "
      "/ measured bandwidth, compute)";
  bars.mark_label = "floor = max(I/O, compute)";
  std::vector<OpFamily> order = {OpFamily::kExpertIoWait, OpFamily::kSpineIoWait};
  for (size_t f = 0; f < kOpFamilyCount; ++f) {
    const auto family = static_cast<OpFamily>(f);
    if (family != OpFamily::kExpertIoWait && family != OpFamily::kSpineIoWait &&
        family != OpFamily::kOther) {
      order.push_back(family);
    }
  }
  order.push_back(OpFamily::kOther);
  for (OpFamily f : order) bars.series.emplace_back(OpFamilyName(f));
  for (const auto& step : j.at("steps")) {
    std::vector<double> values;
    values.reserve(order.size());
    for (OpFamily f : order) values.push_back(step.at("ops").value(OpFamilyName(f), 0.0));
    bars.values.push_back(std::move(values));
    bars.marks.push_back(step.value("floor_s", -1.0));
    bars.bar_labels.push_back(std::to_string(step.value("position", 0)) +
                              (step.value("counted", true) ? "" : "*"));
  }
  report::Svg svg(1100, 520);
  report::DrawStackedBars(svg, bars, {0, 0, 1100, 520});
  return svg.Finish();
}

void PrintReport(const nlohmann::json& j) {
  std::printf("| field | value |\n|---|---|\n");
  for (const char* key : {"scenario",
                          "tokens",
                          "s_per_token",
                          "floor_s",
                          "floor_ratio",
                          "read_floor_s",
                          "io_floor_ratio",
                          "disk_gbps",
                          "disk_gbps_before",
                          "disk_gbps_after",
                          "expert_bytes_per_token",
                          "expert_bytes_needed_per_token",
                          "spine_bytes_per_token",
                          "spine_streamed_bytes_per_token",
                          "engine_read_bytes_per_token",
                          "spine_resident_bytes",
                          "major_faults_per_token",
                          "disk_busy_fraction",
                          "proc_read_bytes_per_token",
                          "compute_s_per_token",
                          "expert_cache_hit_rate",
                          "prefetch_hits_per_token",
                          "expert_read_mode",
                          "expert_cache_bytes",
                          "memory_limit",
                          "peak_memory_bytes",
                          "speculate",
                          "draft_max",
                          "speculate_s_per_token",
                          "tokens_per_pass",
                          "acceptance"}) {
    if (!j.contains(key)) continue;
    const auto& v = j[key];
    if (v.is_number_float()) {
      std::printf("| %s | %.4g |\n", key, v.get<double>());
    } else {
      std::printf("| %s | %s |\n", key,
                  v.is_string() ? v.get<std::string>().c_str() : v.dump().c_str());
    }
  }
  if (j.contains("replay")) {
    for (const auto& r : j["replay"]) {
      std::printf("| replay k=%lld | %.4g s/token, %.2f tokens/pass, %.4g bytes/token |\n",
                  static_cast<long long>(r.value("k", 0)), r.value("s_per_token", 0.0),
                  r.value("tokens_per_pass", 0.0), r.value("bytes_per_token", 0.0));
    }
  }
  if (!j.contains("ops_s_per_token")) return;
  for (const auto& [family, seconds] : j["ops_s_per_token"].items()) {
    std::printf("| ops: %s s/token | %.4g |\n", family.c_str(), seconds.get<double>());
  }
  std::printf("| ops: sum s/token | %.4g |\n", j.value("ops_sum_s_per_token", 0.0));
}

int RunDecodeBench(const DecodeBenchArgs& a) {
  if (!a.json_path.empty()) {  // before the benchmark, which takes minutes on a real model
    if (Status st = CheckOutputPath("--json", a.json_path); !st.ok()) return Fail(st);
  }
  auto base = a.model.Options();
  if (!base.ok()) return Fail(base.status());
  EngineOptions options = *base;
  options.max_draft = a.speculate == "off" ? 0 : a.draft_max;
  auto limit = ApplyBenchScenario(a.scenario, &options);
  if (!limit.ok()) return Fail(limit.status());
  nlohmann::json j;
  if (int rc = RunMeasuredChild(
          *limit, a.no_memory_limit, [&] { return MeasureDecode(a, options); }, &j);
      rc != 0) {
    return rc;
  }
  PrintReport(j);
  if (!a.json_path.empty()) {
    const std::string text = j.dump(1) + "\n";
    Status st = WriteFileAtomically(a.json_path, text.data(), text.size());
    if (!st.ok()) return Fail(st);
  }
  if (!a.svg_path.empty()) {
    const std::string text = DecodeSvg(j);
    Status st = WriteFileAtomically(a.svg_path, text.data(), text.size());
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

}  // namespace

void RegisterBenchDecode(CLI::App* bench, int* exit_code) {
  auto args = std::make_shared<DecodeBenchArgs>();
  CLI::App* cmd = bench->add_subcommand(
      "decode",
      "Decode seconds per token against the floor (disk bytes / measured disk bandwidth, or "
      "compute), under a real memory limit (scenarios: docs/PERFORMANCE.md)");
  args->model.Add(cmd);
  args->model.quiet_plan = true;
  AddBenchScenarioOption(cmd, &args->scenario);
  cmd->add_option("--steps", args->steps, "Decode steps (the first is not counted)")
      ->check(IntRange(2, 100000))
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "Prompt length before decoding")
      ->check(IntRange(1, 100000))
      ->capture_default_str();
  cmd->add_option("--probe-experts", args->probe_experts,
                  "Expert reads for the disk measurement (0 = about 1 GiB)");
  cmd->add_option("--speculate", args->speculate,
                  "Also measure speculative decoding: ngram (prompt lookup, the adaptive policy) "
                  "or replay (the baseline's own greedy continuation offered as drafts, k = 1, 2, "
                  "4, 8: the economics of a verify pass)")
      ->check(OneOf({"off", "ngram", "replay"}))
      ->capture_default_str();
  cmd->add_option("--draft-max", args->draft_max, "Most drafts per verify pass")
      ->check(IntRange(1, 64))
      ->capture_default_str();
  cmd->add_flag("--no-memory-limit", args->no_memory_limit,
                "Do not create a memory cgroup (numbers are then not trustworthy)");
  cmd->add_option("--json", args->json_path,
                  "Also write the report as JSON (with every step's op-family breakdown)");
  cmd->add_option("--svg", args->svg_path,
                  "Also draw each step's time by op family and I/O wait, with its floor, as a "
                  "plain SVG");
  cmd->callback([args, exit_code] { *exit_code = RunDecodeBench(*args); });
}

}  // namespace deltafin::cli
