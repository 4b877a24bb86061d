#include "cli/plan_disk.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#if defined(__linux__)
#include <linux/magic.h>  // TMPFS_MAGIC, RAMFS_MAGIC (Linux only; macOS has neither filesystem)
#include <sys/statfs.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "base/byte_size.h"
#include "io/direct_file.h"

namespace deltafin::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Room left beside a probe file, so that measuring a drive never fills it.
constexpr uint64_t kProbeHeadroom = 64ull << 20;

// The files opened for direct reads, those shorter than one span left out.
Result<std::vector<DirectFile>> OpenForProbe(const std::vector<std::string>& files, uint64_t span,
                                             bool* buffered) {
  std::vector<DirectFile> opened;
  for (const auto& f : files) {
    DF_ASSIGN_OR_RETURN(DirectFile d, DirectFile::Open(f, ReadMode::kDirect));
    if (d.size() < span) continue;
    if (buffered != nullptr && d.mode() != ReadMode::kDirect) *buffered = true;
    opened.push_back(std::move(d));
  }
  if (opened.empty()) return Status::Error("no file to probe is at least one expert long");
  return opened;
}

}  // namespace

TempDir::~TempDir() {
  std::error_code ec;
  if (!path.empty()) fs::remove_all(path, ec);
}

double CpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

Result<double> ProbeDirectReads(const std::vector<std::string>& files, uint64_t span, int depth,
                                uint64_t max_bytes, double max_seconds, uint64_t seed,
                                double* cpu_per_byte, bool* buffered) {
  DF_ASSIGN_OR_RETURN(const std::vector<DirectFile> opened, OpenForProbe(files, span, buffered));
  std::atomic<uint64_t> done{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  Status first_error;
  const size_t capacity = DirectFile::BufferBytesFor(span);
  const double cpu0 = CpuSeconds();
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(depth));
  for (int t = 0; t < depth; ++t) {
    pool.emplace_back([&, t] {
      // O_DIRECT wants the buffer aligned to the device block (DirectFile::kIoAlignment).
      std::unique_ptr<uint8_t, decltype(&std::free)> buffer(
          static_cast<uint8_t*>(std::aligned_alloc(DirectFile::kIoAlignment, capacity)),
          &std::free);
      uint64_t s = seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(t + 1);
      while (!stop.load(std::memory_order_relaxed)) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        const uint64_t r = s * 2685821657736338717ull;
        const DirectFile& f = opened[r % opened.size()];
        const uint64_t offset = (r >> 20) % (f.size() - span + 1);
        auto got = f.ReadSpan(offset, span, buffer.get(), capacity);
        if (!got.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.ok()) first_error = got.status();
          stop = true;
          break;
        }
        if (done.fetch_add(span) + span >= max_bytes || Seconds(t0, Clock::now()) > max_seconds) {
          stop = true;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  const double secs = Seconds(t0, Clock::now());
  if (!first_error.ok()) return first_error;
  const double bytes = static_cast<double>(done.load());
  if (cpu_per_byte != nullptr) *cpu_per_byte = (CpuSeconds() - cpu0) / bytes;
  return bytes / secs;
}

Result<DepthSweep> MeasureDepths(const std::vector<std::string>& files, uint64_t span,
                                 const DiskProbeOptions& o, uint64_t seed) {
  std::vector<int> qds = {1, 2, 4, o.io_threads};
  if (o.quick) qds = {1, o.io_threads};
  std::sort(qds.begin(), qds.end());
  qds.erase(std::unique(qds.begin(), qds.end()), qds.end());
  DepthSweep sweep;
  for (int qd : qds) {
    double cpu = 0;
    DF_ASSIGN_OR_RETURN(const double bps,
                        ProbeDirectReads(files, span, qd, o.quick ? (64ull << 20) : (768ull << 20),
                                         o.quick ? 0.5 : 3.0, seed + static_cast<uint64_t>(qd),
                                         &cpu, &sweep.buffered));
    sweep.depths.push_back({qd, bps});
    // The engine keeps --io-threads reads in flight: that depth's rate is the one it gets.
    if (qd == o.io_threads) {
      sweep.bps = bps;
      sweep.cpu_s_per_byte = cpu;
    }
  }
  return sweep;
}

uint64_t ProbeFileBytes(bool quick, uint64_t span) {
  return std::max<uint64_t>(quick ? (128ull << 20) : (1ull << 30), 4 * span);
}

uint64_t FreeDisk(const std::string& dir) {
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return 0;
  return static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
}

Result<std::string> WriteProbeFile(const std::string& dir, uint64_t bytes, const std::string& what,
                                   TempDir* holder) {
  std::string tmpl = (fs::path(dir) / "deltafin-plan-probe-XXXXXX").string();
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  if (::mkdtemp(name.data()) == nullptr) {
    return Status::Error(what +
                         ": cannot create a temporary folder there: " + std::strerror(errno));
  }
  holder->path = name.data();
  const std::string path = holder->path + "/probe.bin";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::Error("cannot create " + path);
  std::vector<uint64_t> block((4u << 20) / 8);
  uint64_t s = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) | 1;
  for (uint64_t done = 0; done < bytes; done += block.size() * 8) {
    for (auto& v : block) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = s;
    }
    if (::write(fd, block.data(), block.size() * 8) != static_cast<ssize_t>(block.size() * 8)) {
      ::close(fd);
      return Status::Error("cannot write the probe file " + path + " (disk full?)");
    }
  }
  // On the device and out of the page cache, so the reads that follow come from the drive (macOS
  // has no fadvise; its direct reads, F_NOCACHE, skip the cache anyway).
  ::fsync(fd);
#if defined(POSIX_FADV_DONTNEED)
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
#endif
  ::close(fd);
  return path;
}

std::optional<std::string> ProbeFolderProblem(const std::string& dir, uint64_t bytes) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return dir + ": no such directory";
  if (!fs::is_directory(dir, ec)) return dir + ": is not a directory";
  // Root passes access(W_OK) on a read-only mount: a folder made and removed tells for sure.
  std::string tmpl = (fs::path(dir) / ".deltafin-plan-write-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return dir + ": not writable (" + std::strerror(errno) + ")";
  }
  ::rmdir(tmpl.c_str());
  const uint64_t free_bytes = FreeDisk(dir);
  if (free_bytes < bytes + kProbeHeadroom) {
    return dir + ": too little free space for a " + HumanBytes(bytes) + " probe file (" +
           HumanBytes(free_bytes) + " free)";
  }
  return std::nullopt;
}

std::optional<std::string> SameDeviceAs(const std::string& dir,
                                        const std::vector<std::string>& earlier) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return std::nullopt;
  for (const std::string& e : earlier) {
    struct stat other {};
    if (::stat(e.c_str(), &other) == 0 && other.st_dev == st.st_dev) return e;
  }
  return std::nullopt;
}

Result<DepthSweep> MeasureDrive(const std::string& dir, uint64_t span, const DiskProbeOptions& o) {
  TempDir holder;  // the probe file goes with it, whatever returns
  DF_ASSIGN_OR_RETURN(const std::string file, WriteProbeFile(dir, ProbeFileBytes(o.quick, span),
                                                             "--drive " + dir, &holder));
  const uint64_t seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  DF_ASSIGN_OR_RETURN(DepthSweep sweep, MeasureDepths({file}, span, o, seed));
#if defined(__linux__)
  // Recent kernels take O_DIRECT on tmpfs, so a direct read does not tell RAM from a drive.
  struct statfs fs_info {};
  if (::statfs(dir.c_str(), &fs_info) == 0) {
    sweep.in_memory = fs_info.f_type == TMPFS_MAGIC || fs_info.f_type == RAMFS_MAGIC;
  }
#endif
  return sweep;
}

}  // namespace deltafin::cli
