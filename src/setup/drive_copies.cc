#include "setup/drive_copies.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/byte_size.h"
#include "base/log.h"
#include "io/sha256.h"
#include "setup/crash_point.h"
#include "setup/downloader.h"

namespace deltafin::setup {

namespace fs = std::filesystem;

namespace {

std::string Errno() { return std::strerror(errno); }

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
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error("drive folder " + dir + " is not writable: " + Errno());
  ::close(fd);
  ::unlink(probe.c_str());
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::Error("drive " + dir + ": " + Errno());
  return std::make_pair(dir, st.st_dev);
}

}  // namespace

Status PreadAll(int fd, uint8_t* buf, uint64_t bytes, uint64_t offset, const std::string& path) {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(fd, buf + done, bytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return Status::Error(path + ": reading at offset " + std::to_string(offset) + ": " + Errno());
    }
    if (got == 0) {
      return Status::Error(path + ": short read at offset " + std::to_string(offset + done));
    }
    done += static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

Result<std::vector<int>> AddDrives(const std::string& model_dir,
                                   const std::vector<std::string>& drives, Placement* p,
                                   std::vector<std::string>* warnings) {
  struct stat model_st {};
  if (::stat(model_dir.c_str(), &model_st) != 0) return Status::Error(model_dir + ": " + Errno());
  const std::string model_real = fs::canonical(model_dir).string();
  std::vector<int> given;  // drive numbers (1-based) of the named folders
  std::vector<dev_t> devices;
  for (const auto& d : drives) {
    DF_ASSIGN_OR_RETURN(auto prepared, PrepareDrive(d));
    const auto& [dir, dev] = prepared;
    if (dir == model_real || dir.rfind(model_real + "/", 0) == 0) {
      return Status::Error("drive " + dir +
                           " is the model folder or inside it; name a folder on another drive");
    }
    auto it = std::find(p->drives.begin(), p->drives.end(), dir);
    int number = 0;
    if (it != p->drives.end()) {
      number = static_cast<int>(it - p->drives.begin()) + 1;
    } else {
      if (static_cast<int>(p->drives.size()) >= Placement::kMaxDrives) {
        return Status::Error("at most " + std::to_string(Placement::kMaxDrives) + " drives");
      }
      p->drives.push_back(dir);
      number = static_cast<int>(p->drives.size());
    }
    if (std::find(given.begin(), given.end(), number) != given.end()) {
      return Status::Error("drive " + dir + " is named twice");
    }
    std::string same;
    if (dev == model_st.st_dev) same = "the model folder";
    for (size_t i = 0; i < devices.size() && same.empty(); ++i) {
      if (devices[i] == dev) same = p->drives[static_cast<size_t>(given[i] - 1)];
    }
    if (!same.empty()) {
      warnings->push_back("drive " + dir + " is on the same device as " + same +
                          ": it adds no read bandwidth");
      LogWarn(warnings->back());
    }
    given.push_back(number);
    devices.push_back(dev);
  }
  return given;
}

Status RecordExpertPlaces(const ShardLayout& layout, int shard, int64_t layers, int64_t experts,
                          const std::string& path, std::vector<std::optional<ExpertPlace>>* where) {
  for (const auto& x : layout.experts) {
    if (x.layer < 0 || x.layer >= layers || x.expert < 0 || x.expert >= experts) {
      return Status::Error(path + ": expert tensor of layer " + std::to_string(x.layer) +
                           " expert " + std::to_string(x.expert) + " outside config.json's shape");
    }
    (*where)[static_cast<size_t>(x.layer * experts + x.expert)] =
        ExpertPlace{shard, x.offset, x.bytes};
  }
  return Status::Ok();
}

uint64_t CopyBlockBytes(const ExpertPlace& x) {
  return (x.offset + x.bytes + 4095) / 4096 * 4096 - x.offset / 4096 * 4096;
}

Result<std::vector<std::pair<size_t, int>>> AssignCopies(
    const Placement& p, const std::vector<std::optional<ExpertPlace>>& where,
    const std::vector<int>& given, int copies, uint64_t header_bytes, uint64_t reserve_bytes) {
  std::vector<uint64_t> budget(given.size());
  for (size_t i = 0; i < given.size(); ++i) {
    const uint64_t free = FreeBytes(p.drives[static_cast<size_t>(given[i] - 1)]);
    budget[i] = free > reserve_bytes + header_bytes ? free - reserve_bytes - header_bytes : 0;
  }
  auto has = [&](size_t key, int drive) { return (p.copies[key] & (1u << drive)) != 0; };
  std::vector<std::pair<size_t, int>> jobs;  // (key, drive number)
  const size_t want = std::min(static_cast<size_t>(copies), given.size());
  size_t turn = 0;
  for (size_t k = 0; k < where.size(); ++k) {
    if (!where[k]) continue;
    size_t have = 0;
    for (const int d : given) have += has(k, d) ? 1 : 0;
    const uint64_t need = CopyBlockBytes(*where[k]);
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
  return jobs;
}

CopyWriter::CopyWriter(std::string model_dir, Placement* placement, std::vector<ShardFile> shards)
    : model_dir_(std::move(model_dir)), p_(placement), shards_(std::move(shards)) {}

CopyWriter::~CopyWriter() {
  for (const auto& [id, fd] : files_) ::close(fd);
}

std::string CopyWriter::FilePath(int drive, int shard) const {
  return p_->drives[static_cast<size_t>(drive - 1)] + "/" +
         shards_[static_cast<size_t>(shard)].name;
}

Result<int> CopyWriter::File(int drive, int shard) {
  auto it = files_.find({drive, shard});
  if (it != files_.end()) return it->second;
  const std::string path = FilePath(drive, shard);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error("cannot open " + path + ": " + Errno());
  files_.emplace(std::make_pair(drive, shard), fd);
  const ShardFile& s = shards_[static_cast<size_t>(shard)];
  struct stat st {};
  ::fstat(fd, &st);
  if (static_cast<uint64_t>(st.st_size) != s.size &&
      ::ftruncate(fd, static_cast<off_t>(s.size)) != 0) {
    return Status::Error("cannot size " + path + ": " + Errno());
  }
  DF_RETURN_IF_ERROR(PwriteAll(fd, s.header.data(), s.header.size(), 0, path, s.size));
  if (::fdatasync(fd) != 0) return Status::Error("cannot sync " + path + ": " + Errno());
  return fd;
}

Status CopyWriter::Write(size_t key, int drive, const ExpertPlace& x, const uint8_t* data,
                         const std::string& sha256) {
  const int64_t E = p_->num_experts;
  if (!p_->sha256[key].empty() && p_->sha256[key] != sha256) {
    return Status::Error("layer " + std::to_string(static_cast<int64_t>(key) / E) + " expert " +
                         std::to_string(static_cast<int64_t>(key) % E) + " at offset " +
                         std::to_string(x.offset) + " no longer has the bytes recorded (sha256 " +
                         sha256 + ", recorded " + p_->sha256[key] + ")");
  }
  DF_ASSIGN_OR_RETURN(const int fd, File(drive, x.shard));
  DF_RETURN_IF_ERROR(PwriteAll(fd, data, x.bytes, x.offset, FilePath(drive, x.shard),
                               shards_[static_cast<size_t>(x.shard)].size));
  CrashPoint("spread-after-write", p_->drives[static_cast<size_t>(drive - 1)]);
  p_->sha256[key] = sha256;
  pending_.push_back(Pending{key, drive, x});
  pending_bytes_ += x.bytes;
  return Status::Ok();
}

Status CopyWriter::Commit() {
  for (const auto& [id, fd] : files_) {
    if (::fdatasync(fd) != 0) {
      return Status::Error("cannot sync a file on " +
                           p_->drives[static_cast<size_t>(id.first - 1)] + ": " + Errno());
    }
    // The read-back comes from the device (macOS has no fadvise: F_NOCACHE reads skip the cache).
#if defined(POSIX_FADV_DONTNEED)
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
#endif
  }
  const int64_t E = p_->num_experts;
  for (const Pending& c : pending_) {
    const std::string path = FilePath(c.drive, c.at.shard);
    back_.resize(c.at.bytes);
    DF_RETURN_IF_ERROR(
        PreadAll(files_.at({c.drive, c.at.shard}), back_.data(), c.at.bytes, c.at.offset, path));
    const std::string sha = Sha256Hex(back_.data(), back_.size());
    if (sha != p_->sha256[c.key]) {
      return Status::Error(path + ": the copy of layer " +
                           std::to_string(static_cast<int64_t>(c.key) / E) + " expert " +
                           std::to_string(static_cast<int64_t>(c.key) % E) + " at offset " +
                           std::to_string(c.at.offset) + " reads back differently (sha256 " + sha +
                           ", written " + p_->sha256[c.key] +
                           "): the drive is failing; nothing "
                           "recorded");
    }
  }
  for (const Pending& c : pending_) {
    p_->copies[c.key] |= 1u << c.drive;
    copies_made_ += 1;
    bytes_copied_ += c.at.bytes;
  }
  pending_.clear();
  pending_bytes_ = 0;
  CrashPoint("spread-before-save", model_dir_);
  DF_RETURN_IF_ERROR(SavePlacement(model_dir_, *p_));
  CrashPoint("spread-after-save", model_dir_);
  return Status::Ok();
}

}  // namespace deltafin::setup
