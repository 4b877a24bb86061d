#include "setup/spread.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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
#include "setup/manifest.h"
#include "setup/shard_layout.h"
#include "weights/config.h"
#include "weights/placement.h"

namespace deltafin::setup {

namespace fs = std::filesystem;

namespace {

// Experts copied between two placement saves: bounds the work a kill -9 loses.
constexpr size_t kBatchExperts = 64;
constexpr uint64_t kBatchBytes = 512ull << 20;

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

struct ExpertPlace {
  int shard = 0;  // index into the model's shard list
  uint64_t offset = 0, bytes = 0;
};

std::string Errno() { return std::strerror(errno); }

Status PreadAll(int fd, uint8_t* buf, uint64_t bytes, uint64_t offset, const std::string& path) {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd, buf + done, bytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      return Status::Error(path + ": reading at offset " + std::to_string(offset) + ": " + Errno());
    if (got == 0) {
      return Status::Error(path + ": short read at offset " + std::to_string(offset + done));
    }
    done += static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

Status PwriteAll(int fd, const uint8_t* buf, uint64_t bytes, uint64_t offset,
                 const std::string& path) {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t put = ::pwrite(fd, buf + done, bytes - done, static_cast<off_t>(offset + done));
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      return Status::Error(path + ": writing at offset " + std::to_string(offset + done) + ": " +
                           (put < 0 ? Errno() : std::string("no progress")));
    }
    done += static_cast<uint64_t>(put);
  }
  return Status::Ok();
}

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

// The folder, created, checked writable; its device.
Result<std::pair<std::string, dev_t>> PrepareDrive(const std::string& given) {
  std::error_code ec;
  fs::create_directories(given, ec);
  if (ec) return Status::Error("cannot create the drive folder " + given + ": " + ec.message());
  if (!fs::is_directory(given, ec)) {
    return Status::Error("drive " + given + " is not a folder");
  }
  const std::string dir = fs::canonical(given, ec).string();
  if (ec) return Status::Error("drive " + given + ": " + ec.message());
  const std::string probe = dir + "/.deltafin-write-test";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::Error("drive folder " + dir + " is not writable: " + Errno());
  ::close(fd);
  ::unlink(probe.c_str());
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::Error("drive " + dir + ": " + Errno());
  return std::make_pair(dir, st.st_dev);
}

uint64_t FreeBytes(const std::string& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return 0;
  return static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
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
  if (manifest && manifest->mode == "stream" && !manifest->complete) {
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
    for (const auto& x : layout.experts) {
      if (x.layer < 0 || x.layer >= L || x.expert < 0 || x.expert >= E) {
        return Status::Error(path + ": expert tensor of layer " + std::to_string(x.layer) +
                             " expert " + std::to_string(x.expert) +
                             " outside config.json's shape");
      }
      where[static_cast<size_t>(x.layer * E + x.expert)] =
          ExpertPlace{static_cast<int>(layouts.size()), x.offset, x.bytes};
    }
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
  struct stat model_st {};
  if (::stat(model_dir.c_str(), &model_st) != 0) return Status::Error(model_dir + ": " + Errno());
  const std::string model_real = fs::canonical(model_dir).string();
  std::vector<int> given;  // drive numbers (1-based) of this run's --drive folders
  std::vector<dev_t> devices;
  for (const auto& d : o.drives) {
    DF_ASSIGN_OR_RETURN(auto prepared, PrepareDrive(d));
    const auto& [dir, dev] = prepared;
    if (dir == model_real || dir.rfind(model_real + "/", 0) == 0) {
      return Status::Error("drive " + dir +
                           " is the model folder or inside it; name a folder on another drive");
    }
    auto it = std::find(p.drives.begin(), p.drives.end(), dir);
    int number = 0;
    if (it != p.drives.end()) {
      number = static_cast<int>(it - p.drives.begin()) + 1;
    } else {
      if (static_cast<int>(p.drives.size()) >= Placement::kMaxDrives) {
        return Status::Error("at most " + std::to_string(Placement::kMaxDrives) + " drives");
      }
      p.drives.push_back(dir);
      number = static_cast<int>(p.drives.size());
    }
    if (std::find(given.begin(), given.end(), number) != given.end()) {
      return Status::Error("drive " + dir + " is named twice");
    }
    std::string same;
    if (dev == model_st.st_dev) same = "the model folder";
    for (size_t i = 0; i < devices.size() && same.empty(); ++i) {
      if (devices[i] == dev) same = p.drives[static_cast<size_t>(given[i] - 1)];
    }
    if (!same.empty()) {
      summary.warnings.push_back("drive " + dir + " is on the same device as " + same +
                                 ": it adds no read bandwidth");
      LogWarn(summary.warnings.back());
    }
    given.push_back(number);
    devices.push_back(dev);
  }

  // What this run wants on each given drive, within its free space.
  std::vector<uint64_t> budget(given.size());
  for (size_t i = 0; i < given.size(); ++i) {
    const uint64_t free = FreeBytes(p.drives[static_cast<size_t>(given[i] - 1)]);
    uint64_t headers = 0;
    for (const auto& l : layouts) headers += (l.header.size() + 4095) / 4096 * 4096;
    budget[i] = free > o.reserve_bytes + headers ? free - o.reserve_bytes - headers : 0;
  }
  auto has = [&](size_t key, int drive) { return (p.copies[key] & (1u << drive)) != 0; };
  auto block_bytes = [](const ExpertPlace& x) {
    return (x.offset + x.bytes + 4095) / 4096 * 4096 - x.offset / 4096 * 4096;
  };
  std::vector<std::pair<size_t, int>> jobs;  // (key, drive number)
  if (!o.hot_trace.empty()) {
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
        const uint64_t need = block_bytes(*where[k]);
        if (need > budget[i]) break;  // the drive is full: colder experts do not go there
        budget[i] -= need;
        jobs.emplace_back(k, given[i]);
      }
    }
  } else {
    const size_t want = std::min(static_cast<size_t>(o.copies), given.size());
    size_t turn = 0;
    for (size_t k = 0; k < where.size(); ++k) {
      if (!where[k]) continue;
      size_t have = 0;
      for (const int d : given) have += has(k, d) ? 1 : 0;
      const uint64_t need = block_bytes(*where[k]);
      for (size_t t = 0; t < given.size() && have < want; ++t) {
        const size_t i = (turn + t) % given.size();
        if (has(k, given[i]) || budget[i] < need) continue;
        budget[i] -= need;
        jobs.emplace_back(k, given[i]);
        ++have;
      }
      ++turn;
      if (have < want) {
        std::string drives;
        for (size_t i = 0; i < given.size(); ++i) {
          drives += (i ? ", " : "") + p.drives[static_cast<size_t>(given[i] - 1)] + " (" +
                    HumanBytes(FreeBytes(p.drives[static_cast<size_t>(given[i] - 1)])) + " free)";
        }
        return Status::Error("not enough space for " + std::to_string(want) + " cop" +
                             (want == 1 ? "y" : "ies") + " of every expert on " + drives +
                             "; nothing was copied");
      }
    }
  }

  // Drive files: the shard's size and header; every other byte a hole until an expert lands.
  std::map<std::pair<int, int>, Fd> files;  // (drive, shard) -> fd
  auto drive_file = [&](int drive, int shard) -> Result<int> {
    auto it = files.find({drive, shard});
    if (it != files.end()) return it->second.fd;
    const std::string path = p.drives[static_cast<size_t>(drive - 1)] + "/" +
                             identity.shards[static_cast<size_t>(shard)].name;
    Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (fd.fd < 0) return Status::Error("cannot open " + path + ": " + Errno());
    struct stat st {};
    ::fstat(fd.fd, &st);
    const uint64_t size = layouts[static_cast<size_t>(shard)].file_size;
    if (static_cast<uint64_t>(st.st_size) != size &&
        ::ftruncate(fd.fd, static_cast<off_t>(size)) != 0) {
      return Status::Error("cannot size " + path + ": " + Errno());
    }
    const auto& header = layouts[static_cast<size_t>(shard)].header;
    DF_RETURN_IF_ERROR(PwriteAll(fd.fd, header.data(), header.size(), 0, path));
    if (::fdatasync(fd.fd) != 0) return Status::Error("cannot sync " + path + ": " + Errno());
    const int raw = fd.fd;
    files.emplace(std::make_pair(drive, shard), std::move(fd));
    return raw;
  };
  std::vector<Fd> sources(identity.shards.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    sources[s] = Fd(::open(shard_paths[s].c_str(), O_RDONLY | O_CLOEXEC));
    if (sources[s].fd < 0) return Status::Error("cannot open " + shard_paths[s] + ": " + Errno());
  }

  // Copy in batches: write, sync, drop from the page cache, read back and hash, then record.
  std::vector<uint8_t> buf, back;
  size_t next = 0;
  while (next < jobs.size()) {
    std::vector<std::pair<size_t, int>> batch;
    uint64_t batch_bytes = 0;
    while (next < jobs.size() && batch.size() < kBatchExperts && batch_bytes < kBatchBytes) {
      batch.push_back(jobs[next++]);
      batch_bytes += where[batch.back().first]->bytes;
    }
    for (const auto& [key, drive] : batch) {
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
      const std::string sha = Sha256Hex(buf.data(), buf.size());
      if (!p.sha256[key].empty() && p.sha256[key] != sha) {
        return Status::Error(src_path + ": layer " + std::to_string(key / E) + " expert " +
                             std::to_string(key % E) + " at offset " + std::to_string(x.offset) +
                             " no longer has the bytes spread recorded (sha256 " + sha +
                             ", recorded " + p.sha256[key] + ")");
      }
      DF_ASSIGN_OR_RETURN(const int fd, drive_file(drive, x.shard));
      DF_RETURN_IF_ERROR(
          PwriteAll(fd, buf.data(), x.bytes, x.offset, p.drives[static_cast<size_t>(drive - 1)]));
      CrashPoint("spread-after-write", p.drives[static_cast<size_t>(drive - 1)]);
      p.sha256[key] = sha;
    }
    for (auto& [id, fd] : files) {
      if (::fdatasync(fd.fd) != 0) {
        return Status::Error("cannot sync a file on " +
                             p.drives[static_cast<size_t>(id.first - 1)] + ": " + Errno());
      }
      ::posix_fadvise(fd.fd, 0, 0, POSIX_FADV_DONTNEED);  // the read-back comes from the device
    }
    for (const auto& [key, drive] : batch) {
      const ExpertPlace& x = *where[key];
      const std::string path = p.drives[static_cast<size_t>(drive - 1)] + "/" +
                               identity.shards[static_cast<size_t>(x.shard)].name;
      back.resize(x.bytes);
      DF_RETURN_IF_ERROR(
          PreadAll(files.at({drive, x.shard}).fd, back.data(), x.bytes, x.offset, path));
      const std::string sha = Sha256Hex(back.data(), back.size());
      if (sha != p.sha256[key]) {
        return Status::Error(path + ": the copy of layer " + std::to_string(key / E) + " expert " +
                             std::to_string(key % E) + " at offset " + std::to_string(x.offset) +
                             " reads back differently (sha256 " + sha + ", written " +
                             p.sha256[key] + "): the drive is failing; nothing recorded");
      }
      p.copies[key] |= 1u << drive;
      summary.copies_made += 1;
      summary.bytes_copied += x.bytes;
    }
    CrashPoint("spread-before-save", model_dir);
    DF_RETURN_IF_ERROR(SavePlacement(model_dir, p));
    CrashPoint("spread-after-save", model_dir);
  }
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
