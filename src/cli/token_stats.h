// Per-token accounting for `run --stats` and `bench decode`: where one decode step's time and
// bytes went (the decode driver's SessionStats difference, deltafin/generator.h), the bytes the
// kernel says the process read (/proc/self/io, StepMeter), and the floor: the step's disk bytes at
// the measured disk bandwidth, or its compute time when that is larger (docs/STREAMING.md, "What
// `--stats` reports").
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deltafin/engine.h"
#include "deltafin/speculate.h"

namespace deltafin::cli {

// read_bytes of /proc/self/io (bytes this process caused to be fetched from storage); 0 where the
// file does not exist (macOS) or lacks the field.
uint64_t ProcReadBytes();
// Major page faults (faults that waited for a read) of this process so far (getrusage).
uint64_t ProcMajorFaults();

// How long the block device that holds a path had reads or writes in flight: the io_ticks field
// of Linux's /sys/dev/block/MAJOR:MINOR/stat, in milliseconds. Where the path is not on a block
// device the kernel reports on (overlay and network filesystems, macOS), available() is false.
// A device near 100 % busy while decode waits on reads is at its own floor, whatever a separate
// bandwidth probe measured.
class DeviceBusyClock {
 public:
  explicit DeviceBusyClock(const std::string& path);
  bool available() const { return !stat_path_.empty(); }
  std::string device() const { return device_; }  // "MAJOR:MINOR"
  uint64_t busy_ms() const;                       // 0 when not available

 private:
  std::string stat_path_;
  std::string device_;
};

struct StepStats {
  int64_t position = 0;  // position of the fed token
  double seconds = 0;    // wall time of the step
  SessionStats delta;    // counters of this step alone
  uint64_t proc_read_bytes = 0;
  uint64_t major_faults = 0;    // page faults of the step that waited for the disk
  uint64_t device_busy_ms = 0;  // the model's block device had I/O in flight (DeviceBusyClock)
  // Spine bytes read from disk: the ring's reads, which the engine counts itself, plus what the
  // kernel counted beyond the engine's reads (a mapped spine's page faults, which the engine does
  // not see one by one). The engine's count also covers reads of a sparse file's holes, which the
  // kernel does not count (the full-size sparse K3 layout).
  uint64_t SpineBytes() const {
    const uint64_t engine = delta.expert_bytes_read + delta.spine_bytes_read;
    return delta.spine_bytes_read + (proc_read_bytes > engine ? proc_read_bytes - engine : 0);
  }
  // max(bytes that had to come from disk / disk bandwidth, compute time): expert bytes needed
  // (not wasted guesses) plus spine bytes. disk_bps <= 0: compute time only.
  double FloorSeconds(double disk_bps) const;
};

// The process's side of one step: StepMeter::Start snapshots the counters the engine does not
// keep (the kernel's read bytes and major faults, the model device's busy time) before a step
// (GenerationCallbacks::OnStepStart, or before a prefill); Finish joins them to the engine's
// numbers of the step. Both commands' per-step lines come from here.
class StepMeter {
 public:
  explicit StepMeter(const DeviceBusyClock* device = nullptr) : device_(device) {}
  // `session`: also snapshots its counters and the time, for a step the decode driver does not
  // measure (a prefill), which Finish(session) then ends.
  void Start(const Session* session = nullptr);
  // `delta` and `seconds`: the engine's counters and the wall time of the step; `position`: that
  // of the last token it fed.
  StepStats Finish(const SessionStats& delta, double seconds, int64_t position) const;
  StepStats Finish(const Session& session) const;

 private:
  const DeviceBusyClock* device_;
  uint64_t io_before_ = 0, faults_before_ = 0, busy_before_ = 0;
  SessionStats session_before_;
  std::chrono::steady_clock::time_point start_;
};

// One human line: time, bytes, hits, I/O wait vs compute, achieved GB/s, floor and ratio; then an
// indented line with the step's op-family breakdown (FormatOps).
std::string FormatStep(const StepStats& step, double disk_bps);
// The families that took time, largest first, in ms ("routed_experts 4.1, attn_res 0.9, ...").
std::string FormatOps(const SessionStats& delta);
// The step's numbers; "ops" holds the seconds of every op family (OpFamilyName keys) and
// "ops_sum_s" their sum, which is the forward passes' wall time (docs/BREAKDOWN.md).
nlohmann::json StepJson(const StepStats& step, double disk_bps);
nlohmann::json OpsJson(const SessionStats& delta);
// A spread model's drives (Engine::DriveStatistics): [{path, bytes_read, reads, busy_fraction,
// gbps, failed}], and one human line per drive.
nlohmann::json DrivesJson(const std::vector<DriveStats>& drives);
std::string FormatDrives(const std::vector<DriveStats>& drives);
double OpsSum(const SessionStats& delta);

// A generation's speculation (the decode driver's totals): "N passes, X tokens per pass,
// acceptance Y% (A of D drafts), Z s per token", and as `run --stats-json`'s `speculation`
// object; `enabled`: whether the generation speculated at all.
std::string FormatSpeculation(const SpeculativeTotals& totals);
nlohmann::json SpeculationJson(bool enabled, const SpeculativeTotals& totals);

// The summary table at the end of `run --stats`: per op family, the prefill seconds and the
// decode milliseconds per token with their share of the measured wall time; then the sum of the
// families against that wall time (what the engine did not see: the CLI's own work between steps).
class OpBreakdownTable {
 public:
  void Add(const StepStats& step, bool decode);
  std::string Format() const;

 private:
  std::array<double, kOpFamilyCount> prefill_{}, decode_{};
  double prefill_wall_ = 0, decode_wall_ = 0;
  int64_t decode_steps_ = 0;
};

}  // namespace deltafin::cli
