#include "setup/spread.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/byte_size.h"
#include "base/log.h"
#include "io/durable_file.h"
#include "io/sha256.h"
#include "setup/crash_point.h"
#include "setup/downloader.h"
#include "setup/drive_copies.h"
#include "setup/manifest.h"
#include "setup/shard_layout.h"
#include "weights/config.h"
#include "weights/placement.h"

namespace deltafin::setup {

namespace fs = std::filesystem;

namespace {

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string Errno() { return std::strerror(errno); }

// Counts of (layer, expert) uses in a router trace (docs/TRACE.md).
Result<std::vector<uint64_t>> TraceCounts(const std::string& path, int64_t layers,
                                          int64_t experts) {
  std::ifstream in(path);
  if (!in) return Status::Error("cannot read the router trace " + path);
  std::vector<uint64_t> counts(static_cast<size_t>(layers * experts), 0);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("layers") || !j["layers"].is_array()) {
      return Status::Error(path + " line " + std::to_string(n) +
                           ": not a router trace line (run --trace writes them)");
    }
    for (const auto& l : j["layers"]) {
      const int64_t layer = l.value("layer", int64_t{-1});
      if (layer < 0 || layer >= layers || !l.contains("experts")) {
        return Status::Error(path + " line " + std::to_string(n) + ": layer " +
                             std::to_string(layer) + " is not a layer of this model");
      }
      for (const auto& e : l["experts"]) {
        const int64_t x = e.is_number_integer() ? e.get<int64_t>() : -1;
        if (x < 0 || x >= experts) {
          return Status::Error(path + " line " + std::to_string(n) + ": expert " + e.dump() +
                               " is not an expert of this model");
        }
        counts[static_cast<size_t>(layer * experts + x)] += 1;
      }
    }
  }
  if (n == 0) return Status::Error("the router trace " + path + " is empty");
  return counts;
}

uint64_t AllocatedBytes(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

}  // namespace

Result<SpreadSummary> Spread(const SpreadOptions& o) {
  SpreadSummary summary;
  const std::string model_dir = o.model_dir;
  if (o.drives.empty()) return Status::Error("spread needs at least one --drive folder");
  if (o.copies < 1) return Status::Error("--copies must be at least 1");
  DF_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  DF_ASSIGN_OR_RETURN(std::optional<Manifest> manifest, Manifest::Load(model_dir));
  // A stream install keeps mode "stream" until fetch-experts-all has every expert (its shards'
  // expert spans are holes until fetched on first use; spreading them would copy holes).
  if (manifest && manifest->mode == "stream") {
    return Status::Error(
        model_dir +
        " is a stream install that does not hold every expert yet: run "
        "`deltafin fetch-experts-all` first (spread copies experts that are on disk)");
  }
  DF_ASSIGN_OR_RETURN(PlacementModel identity, DescribePlacementModel(model_dir));
  if (identity.shards.empty()) return Status::Error(model_dir + " has no .safetensors shards");

  // Where every routed expert sits in the model folder (the copies use the same offsets).
  const int64_t L = config.num_hidden_layers, E = config.num_experts;
  std::vector<std::optional<ExpertPlace>> where(static_cast<size_t>(L * E));
  std::vector<ShardLayout> layouts;
  std::vector<std::string> shard_paths;
  for (const auto& s : identity.shards) {
    const std::string path = (fs::path(model_dir) / s.name).string();
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) return Status::Error("cannot open " + path + ": " + Errno());
    DF_ASSIGN_OR_RETURN(ShardLayout layout, ReadLocalLayout(fd.fd, s.size, path));
    DF_RETURN_IF_ERROR(
        RecordExpertPlaces(layout, static_cast<int>(layouts.size()), L, E, path, &where));
    layouts.push_back(std::move(layout));
    shard_paths.push_back(path);
  }

  // The placement so far (a re-run resumes it), or a new one with every expert on the model folder.
  DF_ASSIGN_OR_RETURN(std::optional<Placement> loaded, LoadPlacement(model_dir, identity));
  Placement p;
  if (loaded) {
    p = std::move(*loaded);
    if (p.num_layers != L || p.num_experts != E) {
      return Status::Error("placement " + PlacementPath(model_dir) +
                           " does not match config.json's layers and experts; remove it");
    }
  } else {
    p.model = identity;
    p.num_layers = L;
    p.num_experts = E;
    p.copies.assign(static_cast<size_t>(L * E), 0);
    p.sha256.assign(static_cast<size_t>(L * E), "");
    for (size_t k = 0; k < where.size(); ++k) p.copies[k] = where[k] ? 1u : 0u;
  }
  for (const auto& w : where) summary.experts += w ? 1 : 0;

  // The drives: checked, merged into the placement's list (earlier drives keep their numbers).
  DF_ASSIGN_OR_RETURN(std::vector<int> given,
                      AddDrives(model_dir, o.drives, &p, &summary.warnings));

  // What this run wants on each given drive, within its free space.
  uint64_t headers = 0;
  for (const auto& l : layouts) headers += (l.header.size() + 4095) / 4096 * 4096;
  auto has = [&](size_t key, int drive) { return (p.copies[key] & (1u << drive)) != 0; };
  std::vector<std::pair<size_t, int>> jobs;  // (key, drive number)
  if (!o.hot_trace.empty()) {
    std::vector<uint64_t> budget(given.size());
    for (size_t i = 0; i < given.size(); ++i) {
      const uint64_t free = FreeBytes(p.drives[static_cast<size_t>(given[i] - 1)]);
      budget[i] = free > o.reserve_bytes + headers ? free - o.reserve_bytes - headers : 0;
    }
    DF_ASSIGN_OR_RETURN(std::vector<uint64_t> counts, TraceCounts(o.hot_trace, L, E));
    std::vector<size_t> order;
    for (size_t k = 0; k < where.size(); ++k) {
      if (where[k]) order.push_back(k);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return counts[a] > counts[b]; });
    for (size_t i = 0; i < given.size(); ++i) {
      for (const size_t k : order) {
        if (has(k, given[i])) continue;
        const uint64_t need = CopyBlockBytes(*where[k]);
        if (need > budget[i]) break;  // the drive is full: colder experts do not go there
        budget[i] -= need;
        jobs.emplace_back(k, given[i]);
      }
    }
  } else {
    DF_ASSIGN_OR_RETURN(jobs, AssignCopies(p, where, given, o.copies, headers, o.reserve_bytes));
  }

  std::vector<CopyWriter::ShardFile> shard_files;
  for (size_t s = 0; s < layouts.size(); ++s) {
    shard_files.push_back({identity.shards[s].name, layouts[s].file_size, layouts[s].header});
  }
  CopyWriter writer(model_dir, &p, std::move(shard_files));
  std::vector<Fd> sources(identity.shards.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    sources[s] = Fd(::open(shard_paths[s].c_str(), O_RDONLY | O_CLOEXEC));
    if (sources[s].fd < 0) return Status::Error("cannot open " + shard_paths[s] + ": " + Errno());
  }

  // Copy in batches: write, sync, drop from the page cache, read back and hash, then record.
  std::vector<uint8_t> buf;
  for (size_t next = 0; next < jobs.size(); ++next) {
    const auto [key, drive] = jobs[next];
    const ExpertPlace& x = *where[key];
    buf.resize(x.bytes);
    // The source: the model folder, or a recorded copy once the model folder gave it up.
    int src = sources[static_cast<size_t>(x.shard)].fd;
    std::string src_path = shard_paths[static_cast<size_t>(x.shard)];
    Fd copy_fd;
    if (!has(key, 0)) {
      int d = 1;
      while (d <= static_cast<int>(p.drives.size()) && !has(key, d)) ++d;
      if (d > static_cast<int>(p.drives.size())) {
        return Status::Error("internal: an expert with no recorded copy");
      }
      src_path = p.drives[static_cast<size_t>(d - 1)] + "/" +
                 identity.shards[static_cast<size_t>(x.shard)].name;
      copy_fd = Fd(::open(src_path.c_str(), O_RDONLY | O_CLOEXEC));
      if (copy_fd.fd < 0) return Status::Error("cannot open " + src_path + ": " + Errno());
      src = copy_fd.fd;
    }
    DF_RETURN_IF_ERROR(PreadAll(src, buf.data(), x.bytes, x.offset, src_path));
    DF_RETURN_IF_ERROR(writer.Write(key, drive, x, buf.data(), Sha256Hex(buf.data(), buf.size()))
                           .WithContext(src_path));
    if (writer.pending() >= kCopyBatchExperts || writer.pending_bytes() >= kCopyBatchBytes ||
        next + 1 == jobs.size()) {
      DF_RETURN_IF_ERROR(writer.Commit());
    }
  }
  summary.copies_made = writer.copies_made();
  summary.bytes_copied = writer.bytes_copied();
  if (!loaded && jobs.empty()) DF_RETURN_IF_ERROR(SavePlacement(model_dir, p));

  // --move: record first, then free; experts moved by an earlier run are punched again (a crash
  // may have come between the two).
  if (o.move) {
    bool changed = false;
    for (size_t k = 0; k < p.copies.size(); ++k) {
      if (where[k] && has(k, 0) && (p.copies[k] & ~1u) != 0) {
        p.copies[k] &= ~1u;
        changed = true;
      }
    }
    if (changed) DF_RETURN_IF_ERROR(SavePlacement(model_dir, p));
  }
  std::vector<uint64_t> before(shard_paths.size());
  for (size_t s = 0; s < shard_paths.size(); ++s) before[s] = AllocatedBytes(shard_paths[s]);
  std::vector<Fd> writable(shard_paths.size());
  for (size_t k = 0; k < p.copies.size(); ++k) {
    if (!where[k] || has(k, 0)) continue;
    summary.experts_moved += 1;
    const ExpertPlace& x = *where[k];
    Fd& fd = writable[static_cast<size_t>(x.shard)];
    const std::string& path = shard_paths[static_cast<size_t>(x.shard)];
    if (fd.fd < 0) fd = Fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (fd.fd < 0)
      return Status::Error("cannot open " + path + " to free moved experts: " + Errno());
    CrashPoint("spread-before-punch", path);
    if (::fallocate(fd.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(x.offset),
                    static_cast<off_t>(x.bytes)) != 0) {
      return Status::Error("cannot free the moved experts' bytes in " + path + " (" + Errno() +
                           "): they are recorded as moved and read from the drives, but their "
                           "space on the model's drive is not freed");
    }
  }
  for (size_t s = 0; s < shard_paths.size(); ++s) {
    if (writable[s].fd >= 0) ::fdatasync(writable[s].fd);
    const uint64_t after = AllocatedBytes(shard_paths[s]);
    summary.bytes_freed += before[s] > after ? before[s] - after : 0;
  }
  for (size_t k = 0; k < p.copies.size(); ++k) {
    summary.copies_recorded += static_cast<uint64_t>(__builtin_popcount(p.copies[k] & ~1u));
  }
  return summary;
}

}  // namespace deltafin::setup
