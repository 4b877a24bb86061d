// `deltafin plan`: predicts seconds per token for each way to run a model on this machine, before
// any download (docs/PLAN.md).
//
// It measures the machine in well under a minute (expert-size direct reads over queue depths on
// the model's own expert shards or a temporary file, spine pages through the page cache the way
// a non-resident spine is read, memory bandwidth, the BF16 / int8 / MXFP4 kernels, RAM or cgroup
// limit, free disk; further drives named with --drive, through a probe file on each), or takes
// those numbers from a profile (--profile FILE or a named one), asks
// Engine::Plan what memory plan each `bench decode` scenario's budget gets, and computes each
// scenario's s/token with the arithmetic of cli/plan_model.h. `--k3` plans the real Kimi K3 from
// its config (made here from the bench preset with K3's dimensions; the config parser checks
// every K3 number), without a download.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "base/byte_size.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "bench/machine_probe.h"
#include "cli/bench_child.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/memory_cgroup.h"
#include "cli/plan_disk.h"
#include "cli/plan_model.h"
#include "cli/plan_prefill_sample.h"
#include "io/direct_file.h"
#include "io/mapped_file.h"
#include "modelgen/make_model.h"

namespace deltafin::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct PlanArgs {
  std::string model_dir;
  bool k3 = false;
  std::string mem_limit;
  std::string json_path;
  std::string profile;
  std::string probe_dir;
  bool quick = false;
  int io_threads = 8;
  int threads = 0;
  double acceptance = 0.7;
  int draft_tokens = 3;
  // Further drives holding a copy of every expert (`deltafin spread`), by their expert read rate.
  std::vector<double> drive_gbps;
  // Folders on further drives (not in the placement yet), each measured with a probe file.
  std::vector<std::string> drives;
  int64_t prompt_tokens = 10000;  // time to first token for a prompt this long
};

// Same process overhead `bench decode` and `bench prefill` add to their cgroup limits.
constexpr uint64_t kProcessOverhead = kBenchProcessOverhead;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// --- Disk measurements ------------------------------------------------------------------------

// The expert shards and one spine shard of a model folder, from its index.
Status ModelShards(const std::string& dir, std::vector<std::string>* experts) {
  std::ifstream in(fs::path(dir) / "model.safetensors.index.json");
  json index = json::parse(in, nullptr, false);
  if (index.is_discarded() || !index.contains("weight_map")) {
    return Status::Error(dir + "/model.safetensors.index.json: missing or not a safetensors index");
  }
  std::set<std::string> expert_files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) continue;
    const std::string path = (fs::path(dir) / file.get<std::string>()).string();
    if (name.find(".experts.") != std::string::npos) expert_files.insert(path);
  }
  std::error_code ec;
  for (const auto& f : expert_files) {
    if (fs::exists(f, ec)) experts->push_back(f);  // a stream install has holes
  }
  if (experts->empty()) return Status::Error(dir + ": no expert shard on disk to probe");
  return Status::Ok();
}

// --- Profiles ---------------------------------------------------------------------------------

json ProfileJson(const MachineProfile& m) {
  // The first drive's rate and the further drives' apart, so the file reads back as the same
  // machine (ProfileFromJson).
  double more = 0;
  json drives = json::array();
  for (const double bps : m.more_drive_bps) {
    more += bps;
    drives.push_back(bps / 1e9);
  }
  return {{"name", m.name},
          {"expert_read_gbps", (m.expert_read_bps - more) / 1e9},
          {"drive_gbps", drives},
          {"memory_gbps", m.memory_bps / 1e9},
          {"bf16_gbps", m.bf16_bps / 1e9},
          {"int8_gbps", m.int8_bps / 1e9},
          {"mxfp4_gbps", m.mxfp4_bps / 1e9},
          {"bf16_call_us", m.bf16_call_s * 1e6},
          {"mxfp4_call_us", m.mxfp4_call_s * 1e6},
          {"fma_gflops", m.fma_per_s / 1e9},
          {"batched_mxfp4_gflops", m.batched_flops / 1e9},
          {"io_cpu_ns_per_kb", m.io_cpu_s_per_byte * 1e9 * 1024},
          {"compute_slowdown_reading", m.compute_slowdown_reading},
          {"threads", m.threads},
          {"ram_budget_gib", static_cast<double>(m.ram_budget) / (1ull << 30)},
          {"free_disk_gib", static_cast<double>(m.free_disk) / (1ull << 30)}};
}

Result<MachineProfile> ProfileFromJson(const json& j, const std::string& label) {
  MachineProfile m;
  auto get = [&](const char* key, double* out, double scale) -> Status {
    if (!j.contains(key) || !j[key].is_number() || !(j[key].get<double>() >= 0)) {
      return Status::Error(label + ": field " + key + " is missing or not a number >= 0");
    }
    *out = j[key].get<double>() * scale;
    return Status::Ok();
  };
  double threads = 0, ram = 0, disk = 0;
  DF_RETURN_IF_ERROR(get("expert_read_gbps", &m.expert_read_bps, 1e9));
  // spine_read_gbps (page-cache spine reads) is ignored: a streamed spine now reads directly.
  DF_RETURN_IF_ERROR(get("memory_gbps", &m.memory_bps, 1e9));
  DF_RETURN_IF_ERROR(get("bf16_gbps", &m.bf16_bps, 1e9));
  DF_RETURN_IF_ERROR(get("int8_gbps", &m.int8_bps, 1e9));
  DF_RETURN_IF_ERROR(get("mxfp4_gbps", &m.mxfp4_bps, 1e9));
  DF_RETURN_IF_ERROR(get("bf16_call_us", &m.bf16_call_s, 1e-6));
  DF_RETURN_IF_ERROR(get("mxfp4_call_us", &m.mxfp4_call_s, 1e-6));
  DF_RETURN_IF_ERROR(get("fma_gflops", &m.fma_per_s, 1e9));
  DF_RETURN_IF_ERROR(get("io_cpu_ns_per_kb", &m.io_cpu_s_per_byte, 1e-9 / 1024));
  if (j.contains("batched_mxfp4_gflops")) {  // optional: without it, the stated efficiency
    DF_RETURN_IF_ERROR(get("batched_mxfp4_gflops", &m.batched_flops, 1e9));
  }
  if (j.contains("compute_slowdown_reading")) {  // optional: older profiles lack it
    DF_RETURN_IF_ERROR(get("compute_slowdown_reading", &m.compute_slowdown_reading, 1));
  }
  if (j.contains("drive_gbps")) {  // optional: further drives with a copy of every expert
    const json& d = j["drive_gbps"];
    if (!d.is_array()) return Status::Error(label + ": field drive_gbps must be a list of GB/s");
    for (const json& g : d) {
      if (!g.is_number() || !(g.get<double>() > 0)) {
        return Status::Error(label + ": field drive_gbps must hold rates > 0 (GB/s)");
      }
      m.more_drive_bps.push_back(g.get<double>() * 1e9);
    }
  }
  DF_RETURN_IF_ERROR(get("threads", &threads, 1));
  DF_RETURN_IF_ERROR(get("ram_budget_gib", &ram, 1));
  DF_RETURN_IF_ERROR(get("free_disk_gib", &disk, 1));
  for (double v :
       {m.expert_read_bps, m.memory_bps, m.bf16_bps, m.int8_bps, m.mxfp4_bps, m.fma_per_s}) {
    if (!(v > 0)) return Status::Error(label + ": bandwidths and rates must be > 0");
  }
  m.threads = std::max(1, static_cast<int>(threads));
  m.ram_budget = static_cast<uint64_t>(ram * (1ull << 30));
  m.free_disk = static_cast<uint64_t>(disk * (1ull << 30));
  m.name = j.value("name", label);
  return m;
}

// An Apple M1 Max-like machine (10-core CPU, 64 GB), stated rather than measured; docs/PLAN.md
// says where each number comes from: SSD 6.6 GB/s with a pool of uncached preads of MBs, cold
// memory 400 GB/s of which the
// CPU cores reach about 105 GB/s. The kernel rates are assumptions (this project's NEON kernels
// have not been timed on an ARM machine): about 0.85 / 0.75 / 0.5 of the CPU's bandwidth.
json M1MaxProfile() {
  return {{"name", "m1-max (stated)"},
          {"expert_read_gbps", 6.6},
          {"memory_gbps", 105.0},
          {"bf16_gbps", 90.0},
          {"int8_gbps", 80.0},
          {"mxfp4_gbps", 50.0},
          {"bf16_call_us", 5.0},
          {"mxfp4_call_us", 5.0},
          {"fma_gflops", 400.0},
          {"io_cpu_ns_per_kb", 20.0},
          {"threads", 8},
          {"ram_budget_gib", 64.0 * 0.9},
          {"free_disk_gib", 2000.0}};
}

// --- The plan ---------------------------------------------------------------------------------

struct Row {
  Prediction p;
  PrefillPrediction prefill;
  ScenarioPlan plan;
  bool fits_machine = true;  // the scenario's budget fits this machine's RAM
};

ModelWorkload WorkloadFrom(const ModelInfo& info) {
  ModelWorkload w;
  w.spine_bytes = info.spine_bytes;
  w.spine_bytes_per_token = info.spine_bytes_per_token;
  w.spine_products = info.spine_products_per_token;
  w.router_bytes = info.router_bytes;
  w.recurrent_state_bytes = info.recurrent_state_bytes;
  w.unoverlapped_spine_bytes = info.unoverlapped_spine_bytes_per_token;
  w.expert_bytes = info.expert_bytes;
  w.experts_per_token = info.experts_per_token;
  w.num_experts = info.num_experts;
  w.num_moe_layers = info.num_moe_layers;
  return w;
}

std::string Gb(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", bytes / 1e9);
  return b;
}

// --- The model -------------------------------------------------------------------------------

// The model being planned: the options every scenario starts from and where its config is.
struct PlanModel {
  EngineOptions options;    // model_dir empty for --k3
  std::string config_json;  // --k3: the config text Engine::Plan reads; empty: the folder's
  int64_t prompt_tokens = 0;
  ModelInfo info;  // the BF16 shape and workload (Engine::Shape)
};

// The config for --model or --k3, the prompt cut to the model's context, and its shape. --k3's
// config is made in memory: nothing is written.
Result<PlanModel> ReadPlanModel(const PlanArgs& a) {
  PlanModel pm;
  pm.options.io_threads = a.io_threads;
  pm.options.threads = a.threads;
  std::string text;
  if (a.k3) {
    DF_ASSIGN_OR_RETURN(pm.config_json, PresetConfigJson("bench", K3ConfigOverrides()));
    text = pm.config_json;
  } else {
    pm.options.model_dir = a.model_dir;
    DF_ASSIGN_OR_RETURN(text, ReadFileToString(a.model_dir + "/config.json"));
  }
  // The context holds the prompt whose time to first token is predicted (at most the model's
  // max_position_embeddings, which Engine::Plan refuses to exceed).
  pm.prompt_tokens = a.prompt_tokens;
  const json config = json::parse(text, nullptr, false);
  const json& text_config = TextConfigOf(config);
  const int64_t max_context = text_config.is_object()
                                  ? text_config.value("max_position_embeddings", int64_t{0})
                                  : int64_t{0};
  if (max_context > 0 && pm.prompt_tokens > max_context) {
    std::fprintf(stderr, "plan: --prompt-tokens %lld is cut to the model's %lld positions\n",
                 static_cast<long long>(pm.prompt_tokens), static_cast<long long>(max_context));
    pm.prompt_tokens = max_context;
  }
  pm.options.context_capacity = std::max<int64_t>(4096, pm.prompt_tokens);
  if (max_context > 0) {
    pm.options.context_capacity = std::min(pm.options.context_capacity, max_context);
  }
  DF_ASSIGN_OR_RETURN(pm.info, Engine::Shape(pm.options, pm.config_json));
  return pm;
}

// --- Measure ---------------------------------------------------------------------------------

struct MachineMeasurements {
  MachineProfile profile;
  std::vector<DepthResult> depths;            // direct reads by queue depth (empty from a profile)
  std::vector<std::string> placement_drives;  // a spread model's drives, as measured
};

// The kernels while experts are read: `read_once` reads a batch of experts, again and again until
// the BF16 probe is done; sets m->compute_slowdown_reading. A failed read ends it with its error.
Status MeasureSlowdown(bool quick, const std::function<Status()>& read_once, MachineProfile* m) {
  std::fprintf(stderr, "plan: measuring the kernels while experts are read...\n");
  Status load_status = Status::Ok();
  m->compute_slowdown_reading = bench::Bf16SlowdownUnder(
      [&](const std::atomic<bool>& stop) {
        while (!stop.load() && load_status.ok()) load_status = read_once();
      },
      quick);
  return load_status;
}

// A model spread over several drives (`deltafin spread`): its shard files in the model folder may
// be holes, so the reads are measured the way the engine makes them, through its drive set (each
// expert from the copy expected to finish first, --io-threads reads in flight per drive). Sets
// the combined rate, the readers' CPU time per byte and the slowdown, and prints each drive's
// share and rate.
Status MeasureSpreadDrives(const PlanArgs& a, const PlanModel& pm, MachineMeasurements* out) {
  MachineProfile& m = out->profile;
  EngineOptions o = pm.options;
  o.experts = EngineOptions::Experts::kStreamed;
  o.io_threads = a.io_threads;
  DF_ASSIGN_OR_RETURN(auto engine, Engine::Load(o));
  const int64_t reads = std::clamp<int64_t>(
      static_cast<int64_t>((a.quick ? (128ull << 20) : (1ull << 30)) / pm.info.expert_bytes), 64,
      4096);
  std::fprintf(stderr,
               "plan: the model is spread over drives: measuring %lld expert reads "
               "through its drive set...\n",
               static_cast<long long>(reads));
  const uint64_t seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  const double cpu0 = CpuSeconds();
  DF_ASSIGN_OR_RETURN(const DiskProbe probe, engine->ProbeDiskBandwidth(reads, seed));
  const double cpu = CpuSeconds() - cpu0;
  uint64_t bytes = 0;
  for (const DriveStats& d : probe.drives) {
    bytes += d.bytes_read;
    out->placement_drives.push_back(d.path);
    std::fprintf(stderr, "plan:   drive %s: %s in %llu reads, %.2f GB/s while busy\n",
                 d.path.c_str(), HumanBytes(d.bytes_read).c_str(),
                 static_cast<unsigned long long>(d.reads), d.gbps);
  }
  m.expert_read_bps = probe.bytes_per_second;
  m.io_cpu_s_per_byte = bytes > 0 ? cpu / static_cast<double>(bytes) : 0;
  out->depths.push_back({a.io_threads, probe.bytes_per_second});
  uint64_t load_seed = seed ^ 0x5bd1e995ull;
  DF_RETURN_IF_ERROR(MeasureSlowdown(
      a.quick, [&] { return engine->ProbeDiskBandwidth(16, ++load_seed).status(); }, &m));
  m.free_disk = FreeDisk(a.model_dir);
  return Status::Ok();
}

// Expert-size direct reads over queue depths, then the kernels while they run (the slowdown).
Status MeasureDisk(const PlanArgs& a, uint64_t expert_bytes, MachineMeasurements* out) {
  MachineProfile& m = out->profile;
  std::vector<std::string> expert_files;
  TempDir probe_holder;
  std::string disk_dir = a.probe_dir;
  if (!a.model_dir.empty()) {
    DF_RETURN_IF_ERROR(ModelShards(a.model_dir, &expert_files));
    if (disk_dir.empty()) disk_dir = a.model_dir;
  }
  if (expert_files.empty() || !a.probe_dir.empty()) {
    if (disk_dir.empty()) disk_dir = ".";
    const uint64_t size = ProbeFileBytes(a.quick, expert_bytes);
    std::fprintf(stderr, "plan: writing a %s probe file in %s...\n", HumanBytes(size).c_str(),
                 disk_dir.c_str());
    DF_ASSIGN_OR_RETURN(std::string path,
                        WriteProbeFile(disk_dir, size, "--probe-dir " + disk_dir, &probe_holder));
    expert_files = {path};
  }
  std::fprintf(stderr, "plan: measuring direct reads of %s spans...\n",
               HumanBytes(expert_bytes).c_str());
  const uint64_t seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  DF_ASSIGN_OR_RETURN(const DepthSweep sweep,
                      MeasureDepths(expert_files, expert_bytes, {a.quick, a.io_threads}, seed));
  out->depths = sweep.depths;
  m.expert_read_bps = sweep.bps;
  m.io_cpu_s_per_byte = sweep.cpu_s_per_byte;
  uint64_t load_seed = seed ^ 0x5bd1e995ull;
  DF_RETURN_IF_ERROR(MeasureSlowdown(
      a.quick,
      [&] {
        double unused = 0;
        return ProbeDirectReads(expert_files, expert_bytes, a.io_threads,
                                a.quick ? (16ull << 20) : (128ull << 20), 0.25, ++load_seed,
                                &unused)
            .status();
      },
      &m));
  m.free_disk = FreeDisk(disk_dir);
  return Status::Ok();
}

// The machine: from the profile, or measured (memory, kernels, disk, and the engine's own RAM
// budget: the plan of `run` with no --mem-limit).
Result<MachineMeasurements> MeasureMachine(const PlanArgs& a, const json& profile_doc,
                                           const PlanModel& pm) {
  MachineMeasurements out;
  MachineProfile& m = out.profile;
  if (!profile_doc.is_null()) {
    auto parsed = ProfileFromJson(profile_doc, "--profile " + a.profile);
    if (!parsed.ok()) return parsed.status();
    out.profile = *parsed;
    return out;
  }
  m.name = "measured";
  if (a.threads > 0) SetDefaultThreadCount(a.threads);
  const auto t0 = Clock::now();
  std::fprintf(stderr, "plan: measuring memory and kernels...\n");
  const bench::ComputeProbe c = bench::MeasureCompute(a.quick);
  m.memory_bps = c.memory_bps;
  m.bf16_bps = c.bf16_bps;
  m.int8_bps = c.int8_bps;
  m.mxfp4_bps = c.mxfp4_bps;
  m.bf16_call_s = c.bf16_call_s;
  m.mxfp4_call_s = c.mxfp4_call_s;
  m.fma_per_s = c.fma_per_s;
  m.batched_flops = c.mxfp4_batched_flops;
  m.threads = c.threads;
  std::error_code ec;
  if (!a.model_dir.empty() && a.probe_dir.empty() &&
      fs::exists(a.model_dir + "/.deltafin/placement.json", ec)) {
    DF_RETURN_IF_ERROR(MeasureSpreadDrives(a, pm, &out));
  } else {
    DF_RETURN_IF_ERROR(MeasureDisk(a, pm.info.expert_bytes, &out));
  }
  std::fprintf(stderr, "plan: measured in %.1f s\n", Seconds(t0, Clock::now()));
  EngineOptions machine = pm.options;
  machine.mem_limit = 0;
  DF_ASSIGN_OR_RETURN(const ModelInfo budget, Engine::Plan(machine, pm.config_json));
  m.ram_budget = budget.memory_budget;
  return out;
}

// More drives (spread, docs/STREAMING.md "Several drives"): with every expert on every drive the
// drive set reads each from the one expected to finish first, so the expert and streamed spine
// reads run at about the sum of the rates (measured: 0.49x one drive's I/O time with two equal
// drives, 0.30-0.32x the slow one's with drives at 2:1). The CPU cost per byte read stays.
// The drives come from the profile (m->more_drive_bps, "drive_gbps") or from --drive (measured,
// in m->more_drive_bps before this runs), and from --drive-gbps.
void AddDrives(const std::vector<double>& drive_gbps, MachineProfile* m) {
  for (const double g : drive_gbps) m->more_drive_bps.push_back(g * 1e9);
  if (m->more_drive_bps.empty()) return;
  const double one = m->expert_read_bps;
  double extra = 0;
  for (const double bps : m->more_drive_bps) extra += bps;
  m->expert_read_bps += extra;
  char note[160];
  std::snprintf(note, sizeof note, " + %zu more drive%s (%.2f + %.2f GB/s combined)",
                m->more_drive_bps.size(), m->more_drive_bps.size() == 1 ? "" : "s", one / 1e9,
                extra / 1e9);
  m->drives_note = note;
}

// A folder named with --drive: a further drive, measured, or left out because its device is one
// whose bandwidth is already counted.
struct MeasuredDrive {
  std::string path;
  std::string same_device_as;  // the folder it shares a device with; empty: measured
  DepthSweep sweep;            // direct reads of expert spans by queue depth (when measured)
};

// Where the model's experts are read today: the model folder, and the folder whose disk was
// probed instead (--probe-dir; with --k3 and no --probe-dir, the current folder).
std::vector<std::string> ModelDiskDirs(const PlanArgs& a) {
  std::vector<std::string> dirs;
  if (!a.model_dir.empty()) dirs.push_back(a.model_dir);
  if (!a.probe_dir.empty()) dirs.push_back(a.probe_dir);
  if (dirs.empty()) dirs.emplace_back(".");
  return dirs;
}

// The --drive folders a probe file will be written to, before anything is measured: each must be
// a writable folder with room for the probe file. One on a device already counted is only
// compared, never written to. Returns 0 or the usage exit code.
int CheckDriveFolders(const PlanArgs& a, const PlanModel& pm) {
  std::vector<std::string> earlier = ModelDiskDirs(a);
  const uint64_t bytes = ProbeFileBytes(a.quick, pm.info.expert_bytes);
  for (const std::string& d : a.drives) {
    std::error_code ec;
    const bool shared = fs::is_directory(d, ec) && SameDeviceAs(d, earlier).has_value();
    if (!shared) {
      if (auto problem = ProbeFolderProblem(d, bytes)) return UsageError("--drive " + *problem);
    }
    earlier.push_back(d);
  }
  return 0;
}

// Each --drive, in order: on the device of the model's disk, of a drive of the placement (a
// spread model) or of an earlier --drive it adds no bandwidth, so it is named in a warning and
// not counted; otherwise its expert reads are measured the way the model's disk is
// (MeasureDrive: a probe file of its own, removed afterwards).
Result<std::vector<MeasuredDrive>> MeasureDrives(const PlanArgs& a, const PlanModel& pm,
                                                 const std::vector<std::string>& placement) {
  std::vector<std::string> earlier = ModelDiskDirs(a);
  earlier.insert(earlier.end(), placement.begin(), placement.end());
  std::vector<MeasuredDrive> drives;
  for (const std::string& d : a.drives) {
    MeasuredDrive md;
    md.path = d;
    if (auto same = SameDeviceAs(d, earlier)) {
      md.same_device_as = *same;
      LogWarn("--drive " + d + " is on the same device as " + *same +
              ": it adds no read bandwidth, so it is not counted");
    } else {
      std::fprintf(stderr, "plan: measuring drive %s with a %s probe file...\n", d.c_str(),
                   HumanBytes(ProbeFileBytes(a.quick, pm.info.expert_bytes)).c_str());
      DF_ASSIGN_OR_RETURN(md.sweep, MeasureDrive(d, pm.info.expert_bytes, {a.quick, a.io_threads}));
    }
    earlier.push_back(d);
    drives.push_back(std::move(md));
  }
  return drives;
}

// --- Predict ---------------------------------------------------------------------------------

// `bench decode`'s resident scenario has no memory limit: a budget no model reaches.
constexpr uint64_t kNoLimit = 1ull << 50;

// The memory plan the engine makes for `mem_limit` and `experts` (0 = the profile's budget).
ScenarioPlan PlanScenario(const std::string& name, const std::string& spine, const PlanModel& pm,
                          uint64_t mem_limit, EngineOptions::Experts experts,
                          uint64_t machine_budget) {
  ScenarioPlan s;
  s.name = name;
  s.spine = spine;
  EngineOptions options = pm.options;
  options.spine_int8 = spine == "int8";
  options.experts = experts;
  options.mem_limit = mem_limit > 0 ? mem_limit : machine_budget;
  auto plan = Engine::Plan(options, pm.config_json);
  if (!plan.ok()) {
    s.fits = false;
    s.note = plan.status().message();
    return s;
  }
  s.experts_streamed = plan->experts_streamed;
  s.expert_cache_bytes = plan->expert_cache_bytes;
  s.budget = plan->memory_budget;
  s.spine_resident = plan->spine_resident;
  s.spine_streamed_bytes = plan->spine_streamed_bytes;
  s.prefill_wave = plan->prefill_wave;
  return s;
}

// The model's shape and workload with the spine in `spine` format ("bf16" or "int8").
Result<ModelInfo> SpineShape(const PlanModel& pm, const std::string& spine) {
  EngineOptions o = pm.options;
  o.spine_int8 = spine == "int8";
  return Engine::Shape(o, pm.config_json);
}

// Everything the report prints: the scenarios' predictions and what they were made with.
struct PlanResult {
  MachineProfile m;
  std::vector<DepthResult> depths;
  std::vector<MeasuredDrive> drives;  // --drive, in the order given
  uint64_t machine_budget = 0;
  StreamingAssumptions assume;
  SpeculationAssumptions spec;
  std::vector<Row> rows;
  std::string prefill_method;  // how the prefill's compute was predicted
};

// The scenarios, each with the budget `bench decode` gives it, for both spine formats.
Status PredictRows(const PlanModel& pm, uint64_t mem_limit, PrefillSampler* sampler,
                   PlanResult* r) {
  std::map<int64_t, double> sampled;  // compute seconds by wave size
  auto sampled_compute = [&](int64_t wave) -> Result<double> {
    if (sampler == nullptr) return 0.0;
    auto it = sampled.find(wave);
    if (it != sampled.end()) return it->second;
    DF_ASSIGN_OR_RETURN(const double s, sampler->Seconds(pm.prompt_tokens, wave));
    sampled[wave] = s;
    return s;
  };
  for (const std::string spine : {"bf16", "int8"}) {
    DF_ASSIGN_OR_RETURN(const ModelInfo shape, SpineShape(pm, spine));
    const ModelWorkload w = WorkloadFrom(shape);
    const uint64_t spine_bytes = shape.spine_bytes;
    const double prefill_flops = PrefillFlops(shape, 0, pm.prompt_tokens, 1);
    struct S {
      const char* name;
      uint64_t limit;
      EngineOptions::Experts experts;
      const char* note;
    };
    const S scenarios[] = {
        {"resident", kNoLimit, EngineOptions::Experts::kMapped,
         "bench decode: every expert mapped in RAM, no limit"},
        {"stream-spine-resident", spine_bytes + (1ull << 30), EngineOptions::Experts::kStreamed,
         "bench decode: budget spine + 1 GiB"},
        {"stream-spine-streamed", spine_bytes / 2, EngineOptions::Experts::kStreamed,
         "bench decode: budget half the spine"},
        {"auto", 0, EngineOptions::Experts::kAuto,
         mem_limit > 0 ? "this machine at --mem-limit" : "this machine's memory budget"},
    };
    for (const S& s : scenarios) {
      Row row;
      row.plan = PlanScenario(s.name, spine, pm, s.limit, s.experts, r->machine_budget);
      if (row.plan.note.empty()) row.plan.note = s.note;
      row.p = PredictScenario(r->m, w, row.plan, r->assume);
      if (row.plan.fits) {
        DF_ASSIGN_OR_RETURN(const double compute_s, sampled_compute(row.plan.prefill_wave));
        row.prefill = PredictPrefill(r->m, w, row.plan, pm.prompt_tokens, prefill_flops, compute_s);
      }
      const uint64_t need = std::string(s.name) == "resident" ? spine_bytes + w.all_expert_bytes()
                            : s.limit == kNoLimit             ? 0
                                                              : s.limit;
      row.fits_machine = row.p.feasible && need <= r->machine_budget + kProcessOverhead;
      r->rows.push_back(row);
      if (std::string(s.name) == "auto" && row.p.feasible) {
        Row sp = row;
        sp.p = PredictSpeculative(r->m, w, row.p, r->spec);
        sp.plan.name = sp.p.name;
        r->rows.push_back(sp);
      }
    }
  }
  return Status::Ok();
}

// --- Report ----------------------------------------------------------------------------------

// A read rate in GB/s, or MB/s below 0.1 GB/s (a slow drive, e.g. a USB stick, is not "0.00").
std::string Rate(double bps) {
  char b[32];
  if (bps >= 1e8) {
    std::snprintf(b, sizeof b, "%.2f GB/s", bps / 1e9);
  } else {
    std::snprintf(b, sizeof b, "%.2f MB/s", bps / 1e6);
  }
  return b;
}

// One line per --drive: its rate by queue depth and the rate counted, or why it is not counted.
void PrintDrives(const PlanArgs& a, const PlanResult& r) {
  for (const MeasuredDrive& d : r.drives) {
    if (!d.same_device_as.empty()) {
      std::printf("drive %s: on the same device as %s, adds no read bandwidth: not counted\n",
                  d.path.c_str(), d.same_device_as.c_str());
      continue;
    }
    std::printf("drive %s: direct reads by queue depth:", d.path.c_str());
    for (const auto& q : d.sweep.depths) std::printf("  %d: %s", q.depth, Rate(q.bps).c_str());
    std::printf("; counted at %s (queue depth %d)\n", Rate(d.sweep.bps).c_str(), a.io_threads);
    if (d.sweep.buffered) {
      std::printf(
          "  (the folder refused O_DIRECT, e.g. tmpfs: these were buffered reads from the page "
          "cache, so the rate means nothing for a drive)\n");
    } else if (d.sweep.in_memory) {
      std::printf(
          "  (the folder is on tmpfs or ramfs, in RAM: the rate means nothing for a drive)\n");
    }
  }
}

void PrintMachine(const PlanArgs& a, const PlanModel& pm, const PlanResult& r, uint64_t mem_limit) {
  const MachineProfile& m = r.m;
  const ModelInfo& info = pm.info;
  std::printf("deltafin plan: %s (%s%s)\n",
              a.k3 ? "Kimi K3 (sizes from its config)" : a.model_dir.c_str(), m.name.c_str(),
              m.drives_note.c_str());
  std::printf(
      "model: %lld layers (%lld MoE), %lld experts top-%lld of %s; spine %s BF16, reads %s of "
      "it per token\n",
      static_cast<long long>(info.num_layers), static_cast<long long>(info.num_moe_layers),
      static_cast<long long>(info.num_experts), static_cast<long long>(info.experts_per_token),
      HumanBytes(info.expert_bytes).c_str(), HumanBytes(info.spine_bytes).c_str(),
      HumanBytes(info.spine_bytes_per_token).c_str());
  std::printf(
      "machine: direct reads %.2f GB/s at queue depth %d (experts and a streamed spine), memory "
      "%.1f GB/s, kernels BF16 %.1f / int8 %.1f / MXFP4 %.1f GB/s (+%.1f / %.1f us a call), %d "
      "threads, RAM budget %s%s, free disk %s\n",
      m.expert_read_bps / 1e9, a.io_threads, m.memory_bps / 1e9, m.bf16_bps / 1e9, m.int8_bps / 1e9,
      m.mxfp4_bps / 1e9, m.bf16_call_s * 1e6, m.mxfp4_call_s * 1e6, m.threads,
      HumanBytes(r.machine_budget).c_str(), mem_limit > 0 ? " (--mem-limit)" : "",
      HumanBytes(m.free_disk).c_str());
  if (m.compute_slowdown_reading > 0) {
    std::printf(
        "kernels run %.2fx slower while the expert readers run (applied to the part of a "
        "streamed step they are busy)\n",
        m.compute_slowdown_reading);
  }
  if (!r.depths.empty()) {
    std::printf("direct reads by queue depth:");
    for (const auto& d : r.depths) std::printf("  %d: %s", d.depth, Rate(d.bps).c_str());
    std::printf("\n");
  }
  PrintDrives(a, r);
  std::printf(
      "batched MXFP4 (64 rows) %.1f GFLOP/s%s; a %lld-token prompt is %.3g TFLOP\n",
      (m.batched_flops > 0 ? m.batched_flops : 2 * m.fma_per_s * kPrefillFmaEfficiency) / 1e9,
      m.batched_flops > 0 ? "" : " (stated: 45 % of the fp32 multiply-add peak)",
      static_cast<long long>(pm.prompt_tokens), PrefillFlops(info, 0, pm.prompt_tokens, 1) / 1e12);
}

void PrintTable(const PlanModel& pm, const PlanResult& r) {
  std::printf("\n%-34s %-5s %10s %9s %7s %9s %8s %8s %8s %10s %-7s %-10s %10s %-7s %s\n",
              "scenario", "spine", "budget", "cache", "hit", "GB/token", "disk s", "spine s",
              "compute", "s/token", "bound", "wave", "prefill s", "bound", "fits here");
  for (const Row& row : r.rows) {
    if (!row.p.feasible) {
      std::printf("%-34s %-5s %s\n", row.plan.name.c_str(), row.plan.spine.c_str(),
                  ("not possible: " + row.p.note).c_str());
      continue;
    }
    const std::string wave =
        std::to_string(row.plan.prefill_wave) + " x" + std::to_string(row.prefill.waves);
    std::printf(
        "%-34s %-5s %10s %9s %6.1f%% %9s %8.3f %8.3f %8.3f %10.3f %-7s %-10s %10.1f %-7s %s\n",
        row.plan.name.c_str(), row.plan.spine.c_str(),
        row.plan.name == "resident" ? "none" : HumanBytes(row.plan.budget).c_str(),
        row.plan.experts_streamed ? HumanBytes(row.plan.expert_cache_bytes).c_str() : "mapped",
        100 * row.p.expert_hit_rate, Gb(static_cast<double>(row.p.bytes_read)).c_str(),
        row.p.expert_disk_s, row.p.spine_disk_s, row.p.compute_s, row.p.s_per_token,
        row.p.bound.c_str(), wave.c_str(), row.prefill.seconds, row.prefill.bound.c_str(),
        row.fits_machine ? "yes" : "no: needs more RAM");
  }
  std::printf(
      "\nresident / stream-* are `bench decode --scenario NAME [--spine int8]` (their budgets, "
      "not this machine's); auto is what `run` does here. int8 needs `deltafin "
      "convert-spine-int8` (not weight-exact). +speculation: %d drafted tokens a pass, acceptance "
      "%.2f; a model of the pass cost at a stated acceptance (the engine's own speculation: "
      "`bench decode --speculate replay`).\n",
      r.spec.draft_tokens, r.spec.acceptance);
  std::printf(
      "prefill s: time to first token for a %lld-token prompt (--prompt-tokens) in the plan's "
      "waves (wave = positions x waves): max(expert and streamed-spine bytes each wave must read "
      "/ read bandwidth, compute); compute %s; `bench prefill --scenario NAME` measures it.\n",
      static_cast<long long>(pm.prompt_tokens), r.prefill_method.c_str());
}

// The fastest `auto` row that fits this machine, speculation aside; null when none does.
const Row* BestRow(const PlanResult& r) {
  const Row* best = nullptr;
  for (const Row& row : r.rows) {
    if (!row.p.feasible || !row.fits_machine ||
        row.p.name.find("speculation") != std::string::npos || row.plan.name != "auto") {
      continue;
    }
    if (best == nullptr || row.p.s_per_token < best->p.s_per_token) best = &row;
  }
  return best;
}

// What the best row would gain: more RAM (the smallest budget, spine + 1, 2, 4, ... GiB, whose
// plan keeps the spine resident), all in RAM, a disk twice as fast or another drive.
void PrintAlternatives(const PlanModel& pm, const PlanResult& r, const Row& best) {
  auto shape = SpineShape(pm, best.p.spine);
  if (!shape.ok()) return;
  const ModelWorkload w = WorkloadFrom(*shape);
  if (!best.plan.spine_resident) {
    for (uint64_t extra = 1ull << 30; extra <= (1ull << 40); extra *= 2) {
      const ScenarioPlan more =
          PlanScenario("more RAM", best.p.spine, pm, shape->spine_bytes + extra,
                       EngineOptions::Experts::kStreamed, r.machine_budget);
      if (!more.fits || !more.spine_resident) continue;
      const Prediction mp = PredictScenario(r.m, w, more, r.assume);
      std::printf("  more RAM: a budget of %s keeps the spine resident: %.3f s/token (%s-bound)\n",
                  HumanBytes(more.budget).c_str(), mp.s_per_token, mp.bound.c_str());
      break;
    }
  }
  for (const Row& row : r.rows) {
    if (row.plan.spine != best.p.spine || row.plan.name != "resident" || !row.p.feasible) continue;
    std::printf("  all in RAM (%s): %.3f s/token (compute-bound)\n",
                HumanBytes(pm.info.spine_bytes + WorkloadFrom(pm.info).all_expert_bytes()).c_str(),
                row.p.s_per_token);
  }
  // Twice the read bandwidth is also what a second drive as fast buys with a copy of every expert
  // (the drive set reads at the sum of the rates); with drives already, one more like the first.
  MachineProfile fast = r.m;
  fast.expert_read_bps *= 2;
  const Prediction f = PredictScenario(fast, w, best.plan, r.assume);
  if (r.m.more_drive_bps.empty()) {
    std::printf(
        "  a second drive as fast with a copy of every expert (`deltafin spread --drive DIR "
        "--copies 2`), or a disk twice as fast: %.3f s/token (%s-bound)\n",
        f.s_per_token, f.bound.c_str());
    return;
  }
  std::printf("  a disk twice as fast: %.3f s/token (%s-bound)\n", f.s_per_token, f.bound.c_str());
  double more = 0;
  for (const double bps : r.m.more_drive_bps) more += bps;
  MachineProfile another = r.m;
  another.expert_read_bps += r.m.expert_read_bps - more;  // the first drive's rate again
  const Prediction a = PredictScenario(another, w, best.plan, r.assume);
  std::printf(
      "  one more drive as fast as the first, with a copy of every expert: %.3f s/token "
      "(%s-bound)\n",
      a.s_per_token, a.bound.c_str());
}

void PrintRecommendation(const PlanModel& pm, const PlanResult& r) {
  std::printf("\nrecommendation:\n");
  const Row* best = BestRow(r);
  if (best == nullptr) {
    std::printf("  nothing runs in this machine's memory budget; see the table's notes\n");
  } else {
    std::printf(
        "  run with --spine %s%s: %.3f s/token predicted (%s-bound; spine %s, experts %s)\n",
        best->p.spine.c_str(),
        best->p.spine == "int8" ? " (after convert-spine-int8; logits differ from BF16)" : "",
        best->p.s_per_token, best->p.bound.c_str(),
        best->plan.spine_resident ? "resident" : "re-read from disk every token",
        best->plan.experts_streamed ? "streamed" : "mapped");
    PrintAlternatives(pm, r, *best);
  }
  const uint64_t full = pm.info.spine_bytes + WorkloadFrom(pm.info).all_expert_bytes();
  const uint64_t free_disk = r.m.free_disk;
  std::printf(
      "  install: a full install needs %s on disk (free: %s)%s; a stream install (`setup "
      "--stream`) fetches each expert on first use, so early tokens are bound by the network "
      "(not predicted here), then run as above\n",
      HumanBytes(full).c_str(), free_disk > 0 ? HumanBytes(free_disk).c_str() : "unknown",
      free_disk > 0 && free_disk < full ? ": it does not fit, use a stream install" : "");
}

json ScenarioJson(const Row& row) {
  json s = {{"name", row.plan.name},
            {"spine", row.plan.spine},
            {"feasible", row.p.feasible},
            {"fits_this_machine", row.fits_machine},
            {"note", row.p.note}};
  if (!row.p.feasible) {
    s["predicted_s_per_token"] = nullptr;
    s["predicted_prefill_s"] = nullptr;
    return s;
  }
  s["predicted_s_per_token"] = row.p.s_per_token;
  s["bytes_read_per_token"] = row.p.bytes_read;
  s["bound"] = row.p.bound;
  s["compute_s"] = row.p.compute_s;
  s["expert_disk_s"] = row.p.expert_disk_s;
  s["spine_disk_s"] = row.p.spine_disk_s;
  s["exposed_io_s"] = row.p.exposed_io_s;
  s["expert_hit_rate"] = row.p.expert_hit_rate;
  s["memory_budget"] = row.plan.budget;
  s["expert_cache_bytes"] = row.plan.expert_cache_bytes;
  s["spine_resident"] = row.plan.spine_resident;
  s["experts_streamed"] = row.plan.experts_streamed;
  s["prefill_wave"] = row.plan.prefill_wave;
  s["prefill_waves"] = row.prefill.waves;
  s["predicted_prefill_s"] = row.prefill.seconds;
  s["prefill_bound"] = row.prefill.bound;
  s["prefill_read_s"] = row.prefill.read_s;
  s["prefill_compute_s"] = row.prefill.compute_s;
  s["prefill_bytes_read"] = row.prefill.bytes_read;
  return s;
}

// --drive, in order: the rate counted (GB/s at --io-threads; null when not counted), the folder it
// shares a device with (null when none), its reads by queue depth and whether they were direct.
json DrivesJson(const PlanResult& r) {
  json drives = json::array();
  for (const MeasuredDrive& d : r.drives) {
    const bool counted = d.same_device_as.empty();
    json queue = json::array();
    for (const auto& q : d.sweep.depths) {
      queue.push_back({{"depth", q.depth}, {"gbps", q.bps / 1e9}});
    }
    drives.push_back({{"path", d.path},
                      {"gbps", counted ? json(d.sweep.bps / 1e9) : json(nullptr)},
                      {"same_device_as", counted ? json(nullptr) : json(d.same_device_as)},
                      {"direct_read_by_queue_depth", queue},
                      {"buffered_reads", d.sweep.buffered},
                      {"in_memory", d.sweep.in_memory}});
  }
  return drives;
}

Status WritePlanJson(const PlanArgs& a, const PlanModel& pm, const PlanResult& r) {
  json doc;
  doc["model"] = a.k3 ? "kimi-k3" : a.model_dir;
  doc["profile"] = ProfileJson(r.m);
  doc["mem_limit"] = r.machine_budget;
  doc["prompt_tokens"] = pm.prompt_tokens;
  doc["prefill_method"] = r.prefill_method;
  json queue = json::array();
  for (const auto& d : r.depths) queue.push_back({{"depth", d.depth}, {"gbps", d.bps / 1e9}});
  doc["direct_read_by_queue_depth"] = queue;
  doc["drives"] = DrivesJson(r);
  doc["speculation"] = {{"draft_tokens", r.spec.draft_tokens}, {"acceptance", r.spec.acceptance}};
  json list = json::array();
  for (const Row& row : r.rows) list.push_back(ScenarioJson(row));
  doc["scenarios"] = std::move(list);
  const std::string text = doc.dump(1) + "\n";
  return WriteFileAtomically(a.json_path, text.data(), text.size());
}

// Usage errors, before anything is measured: the folders, the output path, --mem-limit and the
// profile. Returns 0 or the exit code.
int CheckPlanArgs(const PlanArgs& a, uint64_t* mem_limit, json* profile_doc) {
  if (a.k3 == !a.model_dir.empty()) return UsageError("give either --model DIR or --k3");
  if (!a.mem_limit.empty()) {
    auto parsed = ParseByteSize(a.mem_limit);
    if (!parsed.ok()) return UsageError("--mem-limit: " + parsed.status().message());
    *mem_limit = *parsed;
  }
  std::error_code ec;
  if (!a.model_dir.empty()) {
    if (!fs::is_directory(a.model_dir, ec)) {
      return UsageError("--model " + a.model_dir + ": " +
                        (fs::exists(a.model_dir, ec) ? "is not a directory" : "no such directory"));
    }
    if (!fs::exists(fs::path(a.model_dir) / "config.json", ec)) {
      return UsageError("--model " + a.model_dir + ": no config.json (not a model folder)");
    }
  }
  if (!a.probe_dir.empty() && !fs::is_directory(a.probe_dir, ec)) {
    return UsageError("--probe-dir " + a.probe_dir + ": no such directory");
  }
  if (!a.json_path.empty()) {
    if (Status st = CheckOutputPath("--json", a.json_path); !st.ok()) {
      return UsageError(st.message());
    }
  }
  if (a.profile.empty()) return 0;
  if (!a.drives.empty()) {
    return UsageError(
        "--drive measures a drive of this machine; a stated --profile takes further drives as "
        "--drive-gbps RATE");
  }
  if (a.profile == "m1-max") {
    *profile_doc = M1MaxProfile();
    return 0;
  }
  std::ifstream in(a.profile);
  if (!in) return UsageError("--profile " + a.profile + ": no such file (or give m1-max)");
  *profile_doc = json::parse(in, nullptr, false);
  if (profile_doc->is_discarded()) return UsageError("--profile " + a.profile + ": not JSON");
  if (profile_doc->contains("profile")) *profile_doc = (*profile_doc)["profile"];  // a --json file
  return 0;
}

// measure -> predict -> report.
int RunPlan(const PlanArgs& a) {
  uint64_t mem_limit = 0;
  json profile_doc;
  if (const int rc = CheckPlanArgs(a, &mem_limit, &profile_doc); rc != 0) return rc;
  auto model = ReadPlanModel(a);
  if (!model.ok()) return Fail(model.status());
  const PlanModel& pm = *model;
  if (const int rc = CheckDriveFolders(a, pm); rc != 0) return rc;

  auto measured = MeasureMachine(a, profile_doc, pm);
  if (!measured.ok()) {
    // A profile that does not parse is the user's to fix; a failed measurement is not.
    return profile_doc.is_null() ? Fail(measured.status())
                                 : UsageError(measured.status().message());
  }
  PlanResult r;
  r.m = measured->profile;
  r.depths = measured->depths;
  r.machine_budget = mem_limit > 0 ? mem_limit : r.m.ram_budget;
  auto drives = MeasureDrives(a, pm, measured->placement_drives);
  if (!drives.ok()) return Fail(drives.status());
  r.drives = std::move(*drives);
  for (const MeasuredDrive& d : r.drives) {
    if (d.same_device_as.empty()) r.m.more_drive_bps.push_back(d.sweep.bps);
  }
  AddDrives(a.drive_gbps, &r.m);
  r.spec = {a.acceptance, a.draft_tokens};
  // Where the machine is measured, the prefill's compute is measured too, on a sample of the
  // model (cli/plan_prefill_sample.h); a stated profile keeps the FLOP model.
  std::optional<PrefillSampler> sampler;
  if (profile_doc.is_null() && pm.prompt_tokens > 0) {
    std::string config_text = pm.config_json;
    if (config_text.empty()) {
      auto read = ReadFileToString(pm.options.model_dir + "/config.json");
      if (read.ok()) config_text = *read;
    }
    std::fprintf(stderr, "plan: measuring prefill on a sample of the model...\n");
    auto made = PrefillSampler::Create(config_text, a.threads);
    if (made.ok()) {
      sampler.emplace(std::move(*made));
      r.prefill_method = "measured on a " + std::to_string(sampler->sample_layers()) +
                         "-layer sample of the model (its widths, experts and top-k; BF16 spine), "
                         "scaled to its layers";
    } else {
      r.prefill_method =
          "FLOPs / batched kernel rate (not sampled: " + made.status().message() + ")";
    }
  } else {
    r.prefill_method = "FLOPs / batched kernel rate (a stated profile is not sampled)";
  }
  if (Status st = PredictRows(pm, mem_limit, sampler ? &*sampler : nullptr, &r); !st.ok()) {
    return Fail(st);
  }
  sampler.reset();

  PrintMachine(a, pm, r, mem_limit);
  PrintTable(pm, r);
  PrintRecommendation(pm, r);
  if (!a.json_path.empty()) {
    if (Status st = WritePlanJson(a, pm, r); !st.ok()) return Fail(st);
  }
  return 0;
}

}  // namespace

void RegisterPlan(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Measure this machine (disk, memory, kernels) and predict seconds per token for each way "
      "to run a model: spine BF16 or int8, resident or streamed, with speculation (docs/PLAN.md)");
  cmd->add_option("--model", args->model_dir, "Model folder to plan (its config and shards)");
  cmd->add_flag("--k3", args->k3, "Plan the real Kimi K3 from its config, without a download");
  cmd->add_option("--mem-limit", args->mem_limit,
                  "RAM for the `auto` scenario (e.g. 64G); default: this machine's budget");
  cmd->add_option("--json", args->json_path,
                  "Also write the scenarios (and the profile) as JSON; --profile reads it back");
  cmd->add_option("--profile", args->profile,
                  "State the machine instead of measuring it: a JSON file (a --json output or "
                  "docs/PLAN.md's fields) or m1-max");
  cmd->add_option("--probe-dir", args->probe_dir,
                  "Probe the disk with a temporary file here (default: the model's expert "
                  "shards; with --k3 the current folder); removed afterwards");
  cmd->add_flag("--quick", args->quick, "Shorter measurements (seconds; rougher numbers)");
  cmd->add_option("--io-threads", args->io_threads, "The engine's expert reads in flight")
      ->check(IntRange(1, 256));
  cmd->add_option("--threads", args->threads, "Compute threads (0 = every available CPU)")
      ->check(IntRange(0, 4096));
  cmd->add_option("--acceptance", args->acceptance,
                  "Speculation: probability a drafted token is accepted (prediction only)")
      ->check(NumberRange(0.0, 0.99));
  cmd->add_option("--draft-tokens", args->draft_tokens, "Speculation: drafted tokens per pass")
      ->check(IntRange(1, 64));
  cmd->add_option("--drive-gbps", args->drive_gbps,
                  "Another drive holding a copy of every expert (deltafin spread), by its expert "
                  "read rate in GB/s; repeat for several. Predicts with the combined rate")
      ->check(NumberRange(0.001, 1000.0));
  cmd->add_option(
      "--drive", args->drives,
      "A folder on another drive that would hold a copy of every expert (deltafin "
      "spread): its expert reads are measured with a temporary file there (removed "
      "afterwards) and added like --drive-gbps; repeat for several. Not with --profile");
  cmd->add_option("--prompt-tokens", args->prompt_tokens,
                  "Predict the time to first token of a prompt this long (prefill s)")
      ->check(IntRange(1, 1 << 20))
      ->capture_default_str();
  cmd->callback([args, exit_code] { *exit_code = RunPlan(*args); });
}

}  // namespace deltafin::cli
