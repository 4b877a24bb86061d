#include "cli/token_stats.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#if defined(__linux__)
#include <sys/sysmacros.h>
#endif

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "deltafin/generator.h"

namespace deltafin::cli {

uint64_t ProcMajorFaults() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<uint64_t>(usage.ru_majflt);
}

DeviceBusyClock::DeviceBusyClock(const std::string& path) {
#if defined(__linux__)
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;
  device_ = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  const std::string stat_path = "/sys/dev/block/" + device_ + "/stat";
  std::ifstream f(stat_path);
  if (f.good()) stat_path_ = stat_path;
#else
  (void)path;
#endif
}

uint64_t DeviceBusyClock::busy_ms() const {
  if (stat_path_.empty()) return 0;
  // Fields: reads, merged, sectors, ms; writes, merged, sectors, ms; in flight; io_ticks; ...
  std::ifstream f(stat_path_);
  uint64_t field[10] = {};
  for (uint64_t& v : field) {
    if (!(f >> v)) return 0;
  }
  return field[9];
}

uint64_t ProcReadBytes() {
  std::ifstream f("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (f >> key >> value) {
    if (key == "read_bytes:") return value;
  }
  return 0;
}

void StepMeter::Start(const Session* session) {
  if (session != nullptr) {
    session_before_ = session->stats();
    start_ = std::chrono::steady_clock::now();
  }
  io_before_ = ProcReadBytes();
  faults_before_ = ProcMajorFaults();
  busy_before_ = device_ != nullptr ? device_->busy_ms() : 0;
}

StepStats StepMeter::Finish(const SessionStats& delta, double seconds, int64_t position) const {
  StepStats step;
  step.position = position;
  step.seconds = seconds;
  step.delta = delta;
  step.proc_read_bytes = ProcReadBytes() - io_before_;
  step.major_faults = ProcMajorFaults() - faults_before_;
  if (device_ != nullptr) step.device_busy_ms = device_->busy_ms() - busy_before_;
  return step;
}

StepStats StepMeter::Finish(const Session& session) const {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return Finish(StatsSince(session.stats(), session_before_), seconds, session.position() - 1);
}

double StepStats::FloorSeconds(double disk_bps) const {
  const double io =
      disk_bps > 0 ? static_cast<double>(delta.expert_bytes_needed + SpineBytes()) / disk_bps : 0;
  return std::max(io, delta.compute_seconds);
}

std::string FormatStep(const StepStats& s, double disk_bps) {
  const double mb = 1e6;
  const double bytes = static_cast<double>(s.delta.expert_bytes_read + s.SpineBytes());
  const double floor = s.FloorSeconds(disk_bps);
  char line[480];
  std::snprintf(line, sizeof line,
                "pos %lld: %.3f s | experts %.1f MB read (%.1f MB needed), %llu/%llu hits "
                "(%llu prefetched), "
                "spine %.1f MB | io wait %.3f s, compute %.3f s | %.2f GB/s | floor %.3f s, "
                "ratio %.2f",
                static_cast<long long>(s.position), s.seconds,
                static_cast<double>(s.delta.expert_bytes_read) / mb,
                static_cast<double>(s.delta.expert_bytes_needed) / mb,
                static_cast<unsigned long long>(s.delta.expert_cache_hits),
                static_cast<unsigned long long>(s.delta.expert_loads),
                static_cast<unsigned long long>(s.delta.prefetch_hits),
                static_cast<double>(s.SpineBytes()) / mb, s.delta.io_wait_seconds,
                s.delta.compute_seconds, s.seconds > 0 ? bytes / s.seconds / 1e9 : 0.0, floor,
                floor > 0 ? s.seconds / floor : 0.0);
  return std::string(line) + "\n  ops ms: " + FormatOps(s.delta);
}

double OpsSum(const SessionStats& d) {
  double sum = 0;
  for (double v : d.op_seconds) sum += v;
  return sum;
}

std::string FormatOps(const SessionStats& d) {
  std::array<size_t, kOpFamilyCount> order;
  for (size_t f = 0; f < kOpFamilyCount; ++f) order[f] = f;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return d.op_seconds[a] > d.op_seconds[b]; });
  std::string out;
  char part[64];
  for (size_t f : order) {
    // Below 5 µs a family is noise at this precision; the JSON has every family.
    if (d.op_seconds[f] < 5e-6) continue;
    std::snprintf(part, sizeof part, "%s%s %.2f", out.empty() ? "" : ", ",
                  OpFamilyName(static_cast<OpFamily>(f)), d.op_seconds[f] * 1e3);
    out += part;
  }
  return out.empty() ? "(none)" : out;
}

nlohmann::json OpsJson(const SessionStats& d) {
  nlohmann::json ops = nlohmann::json::object();
  for (size_t f = 0; f < kOpFamilyCount; ++f) {
    ops[OpFamilyName(static_cast<OpFamily>(f))] = d.op_seconds[f];
  }
  return ops;
}

std::string FormatSpeculation(const SpeculativeTotals& t) {
  char line[200];
  std::snprintf(
      line, sizeof line,
      "%lld passes, %.2f tokens per pass, acceptance %.1f%% (%lld of %lld drafts), %.4f s "
      "per token",
      static_cast<long long>(t.passes), t.tokens_per_pass(), 100 * t.acceptance(),
      static_cast<long long>(t.accepted), static_cast<long long>(t.drafted), t.seconds_per_token());
  return line;
}

nlohmann::json SpeculationJson(bool enabled, const SpeculativeTotals& t) {
  return {{"enabled", enabled},
          {"passes", t.passes},
          {"tokens", t.tokens},
          {"drafted", t.drafted},
          {"accepted", t.accepted},
          {"tokens_per_pass", t.tokens_per_pass()},
          {"acceptance", t.acceptance()},
          {"seconds", t.seconds},
          {"seconds_per_token", t.seconds_per_token()}};
}

void OpBreakdownTable::Add(const StepStats& step, bool decode) {
  auto& ops = decode ? decode_ : prefill_;
  for (size_t f = 0; f < kOpFamilyCount; ++f) ops[f] += step.delta.op_seconds[f];
  (decode ? decode_wall_ : prefill_wall_) += step.seconds;
  if (decode) ++decode_steps_;
}

std::string OpBreakdownTable::Format() const {
  const double per_token = decode_steps_ > 0 ? 1e3 / static_cast<double>(decode_steps_) : 0;
  const auto share = [](double part, double whole) { return whole > 0 ? 100 * part / whole : 0; };
  std::string out = "where the time went (" + std::to_string(decode_steps_) +
                    " decode steps; docs/BREAKDOWN.md)\n";
  char row[160];
  std::snprintf(row, sizeof row, "  %-20s %12s %9s %16s %9s\n", "op family", "prefill s",
                "prefill%", "decode ms/token", "decode%");
  out += row;
  double prefill_sum = 0, decode_sum = 0;
  for (size_t f = 0; f < kOpFamilyCount; ++f) {
    prefill_sum += prefill_[f];
    decode_sum += decode_[f];
    std::snprintf(row, sizeof row, "  %-20s %12.4f %8.1f%% %16.3f %8.1f%%\n",
                  OpFamilyName(static_cast<OpFamily>(f)), prefill_[f],
                  share(prefill_[f], prefill_wall_), decode_[f] * per_token,
                  share(decode_[f], decode_wall_));
    out += row;
  }
  std::snprintf(row, sizeof row, "  %-20s %12.4f %8.1f%% %16.3f %8.1f%%\n", "sum of families",
                prefill_sum, share(prefill_sum, prefill_wall_), decode_sum * per_token,
                share(decode_sum, decode_wall_));
  out += row;
  std::snprintf(row, sizeof row, "  %-20s %12.4f %8.1f%% %16.3f %8.1f%%\n", "wall (measured)",
                prefill_wall_, prefill_wall_ > 0 ? 100.0 : 0.0, decode_wall_ * per_token,
                decode_wall_ > 0 ? 100.0 : 0.0);
  out += row;
  out.pop_back();  // LogInfo ends the line
  return out;
}

nlohmann::json StepJson(const StepStats& s, double disk_bps) {
  const double floor = s.FloorSeconds(disk_bps);
  return {{"position", s.position},
          {"seconds", s.seconds},
          {"expert_bytes_read", s.delta.expert_bytes_read},
          {"expert_bytes_needed", s.delta.expert_bytes_needed},
          {"spine_bytes_read", s.SpineBytes()},
          {"proc_read_bytes", s.proc_read_bytes},
          {"major_faults", s.major_faults},
          {"expert_loads", s.delta.expert_loads},
          {"expert_cache_hits", s.delta.expert_cache_hits},
          {"prefetch_hits", s.delta.prefetch_hits},
          {"prefetch_issued", s.delta.prefetch_issued},
          {"prefetch_wasted", s.delta.prefetch_wasted},
          {"io_wait_seconds", s.delta.io_wait_seconds},
          {"compute_seconds", s.delta.compute_seconds},
          {"disk_gbps", disk_bps / 1e9},
          {"floor_s", floor},
          {"floor_ratio", floor > 0 ? s.seconds / floor : 0.0},
          {"ops", OpsJson(s.delta)},
          {"ops_sum_s", OpsSum(s.delta)}};
}

nlohmann::json DrivesJson(const std::vector<DriveStats>& drives) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& d : drives) {
    a.push_back({{"path", d.path},
                 {"bytes_read", d.bytes_read},
                 {"reads", d.reads},
                 {"busy_seconds", d.busy_seconds},
                 {"busy_fraction", d.busy_fraction},
                 {"gbps", d.gbps},
                 {"failed", d.failed}});
  }
  return a;
}

std::string FormatDrives(const std::vector<DriveStats>& drives) {
  uint64_t total = 0;
  for (const auto& d : drives) total += d.bytes_read;
  std::string out;
  for (const auto& d : drives) {
    char line[512];
    std::snprintf(
        line, sizeof line,
        "%sdrive %s: %.1f MB in %llu reads (%.0f %% of the bytes), busy %.0f %%, "
        "%.2f GB/s while busy%s",
        out.empty() ? "" : "\n", d.path.c_str(), static_cast<double>(d.bytes_read) / 1e6,
        static_cast<unsigned long long>(d.reads),
        total > 0 ? 100.0 * static_cast<double>(d.bytes_read) / static_cast<double>(total) : 0.0,
        100 * d.busy_fraction, d.gbps, d.failed ? " (failed a read: not used since)" : "");
    out += line;
  }
  return out;
}

}  // namespace deltafin::cli
