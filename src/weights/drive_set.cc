#include "weights/drive_set.h"

#include <algorithm>
#include <filesystem>

#include "base/log.h"

namespace deltafin {

namespace fs = std::filesystem;

namespace {

constexpr double kAssumedBandwidth = 1e9;  // bytes/s before a drive's first measurement
constexpr double kWindowSeconds = 0.25;    // busy time per bandwidth sample
// A drive with reads in flight and none finished for this long is stalled (a USB drive resetting,
// a disk spinning up): its expected completion becomes at least the stall so far, so reads with a
// copy elsewhere stop waiting for it. Longer than a throttled drive's normal gaps (cgroup blkio
// releases reads in 100 ms slices).
constexpr double kStallSeconds = 0.25;

uint64_t PackLocation(int shard, uint64_t offset) {
  return (static_cast<uint64_t>(shard) << 40) | offset;
}

}  // namespace

Result<std::unique_ptr<DriveSetReader>> DriveSetReader::Open(const ModelWeights& weights,
                                                             const std::string& model_dir,
                                                             const Placement& placement,
                                                             bool direct) {
  const ModelConfig& c = weights.config;
  if (placement.num_layers != c.num_hidden_layers || placement.num_experts != c.num_experts) {
    return Status::Error("placement " + PlacementPath(model_dir) + " is for " +
                         std::to_string(placement.num_layers) + " layers of " +
                         std::to_string(placement.num_experts) + " experts, the model has " +
                         std::to_string(c.num_hidden_layers) + " of " +
                         std::to_string(c.num_experts));
  }
  std::unique_ptr<DriveSetReader> r(new DriveSetReader());
  r->shard_paths_ = weights.checkpoint.shard_paths();
  r->copies_ = placement.copies;
  const size_t n_drives = placement.drives.size() + 1;
  r->drives_.resize(n_drives);
  for (size_t d = 0; d < n_drives; ++d) {
    Drive& drive = r->drives_[d];
    drive.path = placement.DrivePath(model_dir, static_cast<int>(d));
    drive.files.resize(r->shard_paths_.size());
    drive.bandwidth = kAssumedBandwidth;
  }
  const ReadMode mode = direct ? ReadMode::kDirect : ReadMode::kBuffered;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = weights.layers[static_cast<size_t>(l)];
    if (!lw.is_moe) continue;
    const int shard = lw.moe.expert_shard;
    const std::string name = fs::path(r->shard_paths_[static_cast<size_t>(shard)]).filename();
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const size_t key = placement.Index(l, e);
      r->keys_.emplace_back(PackLocation(shard, lw.moe.expert_offsets[static_cast<size_t>(e)]),
                            static_cast<int32_t>(key));
      for (size_t d = 0; d < n_drives; ++d) {
        Drive& drive = r->drives_[d];
        if ((r->copies_[key] & (1u << d)) == 0 || drive.bad ||
            drive.files[static_cast<size_t>(shard)].size() > 0) {
          continue;
        }
        const std::string path =
            d == 0 ? r->shard_paths_[static_cast<size_t>(shard)] : drive.path + "/" + name;
        auto f = DirectFile::Open(path, mode);
        if (!f.ok()) {
          LogWarn("drive " + drive.path + " cannot be read (" + f.status().message() +
                  "): its copies are not used");
          drive.bad = true;
          drive.error = f.status().message();
          continue;
        }
        drive.files[static_cast<size_t>(shard)] = std::move(*f);
      }
    }
  }
  std::sort(r->keys_.begin(), r->keys_.end());
  // Every expert needs one copy on a drive that opened.
  uint32_t usable = 0;
  for (size_t d = 0; d < n_drives; ++d) usable |= r->drives_[d].bad ? 0u : (1u << d);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!weights.layers[static_cast<size_t>(l)].is_moe) continue;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const uint32_t bits = r->copies_[placement.Index(l, e)];
      if ((bits & usable) != 0) continue;
      std::string where;
      for (size_t d = 0; d < n_drives; ++d) {
        if (bits & (1u << d)) where += (where.empty() ? "" : ", ") + r->drives_[d].path;
      }
      return Status::Error(
          "layer " + std::to_string(l) + " expert " + std::to_string(e) +
          " has no readable copy: " +
          (where.empty() ? std::string("the placement records none") : "it is only on " + where));
    }
  }
  for (const auto& d : r->drives_) {
    for (const auto& f : d.files) r->buffered_ |= f.size() > 0 && f.mode() == ReadMode::kBuffered;
  }
  r->opened_ = std::chrono::steady_clock::now();
  return r;
}

int32_t DriveSetReader::Key(int shard, uint64_t offset) const {
  const uint64_t want = PackLocation(shard, offset);
  auto it = std::lower_bound(keys_.begin(), keys_.end(), std::make_pair(want, INT32_MIN));
  if (it == keys_.end() || it->first != want) return -1;
  return it->second;
}

double DriveSetReader::BusyNowLocked(const Drive& d,
                                     std::chrono::steady_clock::time_point now) const {
  double busy = d.busy_seconds;
  if (d.inflight > 0) busy += std::chrono::duration<double>(now - d.busy_since).count();
  return busy;
}

uint64_t DriveSetReader::DiskBytes(int /*shard*/, uint64_t offset, uint64_t length) const {
  // Every copy sits at the model folder's offset; direct reads cover whole aligned blocks.
  if (buffered_) return length;
  const uint64_t a = DirectFile::kIoAlignment;
  return (offset + length + a - 1) / a * a - offset / a * a;
}

const char* DriveSetReader::ModeName() const { return buffered_ ? "buffered" : "direct"; }

int DriveSetReader::BestLocked(int32_t key, uint64_t bytes, uint32_t allowed,
                               std::chrono::steady_clock::time_point now, double* cost_out) const {
  const uint32_t bits = copies_[static_cast<size_t>(key)] & allowed;
  int best = -1;
  double best_cost = 0;
  for (size_t d = 0; d < drives_.size(); ++d) {
    const Drive& drive = drives_[d];
    if ((bits & (1u << d)) == 0 || drive.bad) continue;
    double cost = static_cast<double>(drive.inflight_bytes + bytes) / drive.bandwidth;
    if (drive.inflight > 0) {
      const double stalled =
          std::chrono::duration<double>(now - std::max(drive.busy_since, drive.last_done)).count();
      if (stalled > kStallSeconds) {
        cost = std::max(cost, stalled + static_cast<double>(bytes) / drive.bandwidth);
      }
    }
    if (best < 0 || cost < best_cost) {
      best = static_cast<int>(d);
      best_cost = cost;
    }
  }
  if (cost_out != nullptr) *cost_out = best_cost;
  return best;
}

void DriveSetReader::ReserveLocked(Drive& d, uint64_t bytes) {
  if (d.inflight++ == 0) d.busy_since = std::chrono::steady_clock::now();
  d.inflight_bytes += bytes;
}

void DriveSetReader::ReleaseLocked(Drive& d, uint64_t bytes) {
  d.last_done = std::chrono::steady_clock::now();
  d.inflight_bytes -= bytes;
  if (--d.inflight == 0) {
    d.busy_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - d.busy_since).count();
  }
}

int DriveSetReader::Choose(int shard, uint64_t offset, uint64_t length, uint32_t free_drives) {
  const int32_t key = Key(shard, offset);
  if (key < 0) return 0;  // ReadOn reports it
  const uint64_t bytes = DiskBytes(shard, offset, length);
  std::lock_guard<std::mutex> lock(mu_);
  // The copy expected to finish first among the drives with room, unless a full drive would
  // finish it sooner still: then the read waits for that drive rather than going to a slower one
  // (a drive twice as fast takes twice the queued bytes before a slower one wins). Ties go to
  // the drive with room.
  double free_cost = 0, any_cost = 0;
  const auto now = std::chrono::steady_clock::now();  // one clock read for both
  int best = BestLocked(key, bytes, free_drives, now, &free_cost);
  const int any = BestLocked(key, bytes, ~0u, now, &any_cost);
  if (any >= 0 && (best < 0 || any_cost < free_cost)) return -1;
  if (best < 0) {
    // No good copy left: a drive holding one, for ReadOn to report. It must be one with room (the
    // scheduler counts the read on that drive's lane); if none has room, wait like a full drive.
    const uint32_t bits = copies_[static_cast<size_t>(key)];
    const uint32_t usable = (bits == 0 ? 1u : bits) & free_drives;
    if (usable == 0) return -1;
    best = __builtin_ctz(usable);
  }
  ReserveLocked(drives_[static_cast<size_t>(best)], bytes);
  return best;
}

Result<const uint8_t*> DriveSetReader::Read(int shard, uint64_t offset, uint64_t length,
                                            uint8_t* buffer, size_t capacity) {
  const int drive = Choose(shard, offset, length, ~0u);
  return ReadOn(drive, shard, offset, length, buffer, capacity);
}

Result<const uint8_t*> DriveSetReader::ReadOn(int drive, int shard, uint64_t offset,
                                              uint64_t length, uint8_t* buffer, size_t capacity) {
  const int32_t key = Key(shard, offset);
  if (key < 0) {
    return Status::Error("internal: no expert of " + ShardPath(shard) + " at offset " +
                         std::to_string(offset));
  }
  const uint64_t bytes = DiskBytes(shard, offset, length);
  std::string failures;  // this read's failures (appended only when a drive fails)
  uint32_t failed_here = 0;
  std::unique_lock<std::mutex> lock(mu_);
  int best = drive;  // reserved by Choose, or below
  for (;;) {
    Drive& d = drives_[static_cast<size_t>(best)];
    if (!d.bad) {
      const DirectFile& file = d.files[static_cast<size_t>(shard)];
      lock.unlock();
      auto data = file.ReadSpan(offset, length, buffer, capacity);
      lock.lock();
      ReleaseLocked(d, bytes);
      if (data.ok()) {
        const auto now = std::chrono::steady_clock::now();
        d.bytes_read += bytes;
        d.reads += 1;
        d.window_bytes += bytes;
        const double busy = BusyNowLocked(d, now);
        const double window = busy - d.window_start_busy;
        if (window >= kWindowSeconds) {
          const double rate = static_cast<double>(d.window_bytes) / window;
          // The first full window replaces the assumed rate; later ones are averaged in.
          d.bandwidth = d.window_start_busy == 0 ? rate : 0.5 * d.bandwidth + 0.5 * rate;
          d.window_bytes = 0;
          d.window_start_busy = busy;
        } else if (d.window_start_busy == 0 && busy >= 0.02) {
          // Before the first full window: what the drive delivered so far.
          d.bandwidth = static_cast<double>(d.window_bytes) / busy;
        }
        return data;
      }
      failed_here |= 1u << best;
      failures +=
          (failures.empty() ? "" : "; ") + ("drive " + d.path + ": " + data.status().message());
      if (!d.bad) {
        d.bad = true;
        d.error = data.status().message();
        LogWarn("drive " + d.path + " failed a read (" + data.status().message() +
                "); it is not used for the rest of the run");
      }
    } else {
      ReleaseLocked(d, bytes);  // went bad before this read started
    }
    best = BestLocked(key, bytes, ~0u, std::chrono::steady_clock::now());
    if (best < 0) {
      // Every drive holding a copy failed: this read's failures first, then drives that failed an
      // earlier read (with that read's error, which names its own offset).
      const uint32_t bits = copies_[static_cast<size_t>(key)];
      for (size_t i = 0; i < drives_.size(); ++i) {
        if ((bits & (1u << i)) == 0 || (failed_here & (1u << i)) != 0) continue;
        failures +=
            (failures.empty() ? "" : "; ") +
            ("drive " + drives_[i].path + " failed an earlier read (" + drives_[i].error + ")");
      }
      return Status::Error("no readable copy left: " + failures);
    }
    ReserveLocked(drives_[static_cast<size_t>(best)], bytes);
  }
}

std::vector<DriveStats> DriveSetReader::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const double wall = std::chrono::duration<double>(now - opened_).count();
  std::vector<DriveStats> out;
  for (const Drive& d : drives_) {
    DriveStats s;
    s.path = d.path;
    s.bytes_read = d.bytes_read;
    s.reads = d.reads;
    s.busy_seconds = BusyNowLocked(d, now);
    s.busy_fraction = wall > 0 ? s.busy_seconds / wall : 0;
    s.gbps = s.busy_seconds > 0 ? static_cast<double>(d.bytes_read) / s.busy_seconds / 1e9 : 0;
    s.failed = d.bad;
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::unique_ptr<ExpertSpanReader>> OpenExpertReader(const ModelWeights& weights,
                                                           const std::string& model_dir,
                                                           bool direct, DriveSetReader** drives) {
  if (drives != nullptr) *drives = nullptr;
  DF_ASSIGN_OR_RETURN(PlacementModel model, DescribePlacementModel(model_dir));
  DF_ASSIGN_OR_RETURN(std::optional<Placement> placement, LoadPlacement(model_dir, model));
  if (!placement) return OpenShardSpanReader(weights, direct);
  DF_ASSIGN_OR_RETURN(auto set, DriveSetReader::Open(weights, model_dir, *placement, direct));
  if (drives != nullptr) *drives = set.get();
  return std::unique_ptr<ExpertSpanReader>(std::move(set));
}

}  // namespace deltafin
