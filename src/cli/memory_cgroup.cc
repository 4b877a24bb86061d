#include "cli/memory_cgroup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

namespace deltafin::cli {

namespace {

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) return Status::Error(path + ": cannot open for writing: " + std::strerror(errno));
  f << text;
  f.flush();
  if (!f) return Status::Error(path + ": cannot write '" + text + "': " + std::strerror(errno));
  return Status::Ok();
}

uint64_t ReadNumber(const std::string& path) {
  std::ifstream f(path);
  uint64_t v = 0;
  return (f >> v) ? v : 0;
}

// This process's memory cgroup: {version, directory}.
std::pair<int, std::string> OwnCgroupDir() {
  std::ifstream f("/proc/self/cgroup");
  std::string line, v2;
  while (std::getline(f, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      return {1, "/sys/fs/cgroup/memory" + path};
    }
    if (controllers.empty()) v2 = "/sys/fs/cgroup" + path;
  }
  return {v2.empty() ? 0 : 2, v2};
}

}  // namespace

Result<MemoryCgroup> MemoryCgroup::Create(uint64_t limit_bytes) {
  auto [version, parent] = OwnCgroupDir();
  if (version == 0) return Status::Error("no memory cgroup found in /proc/self/cgroup");
  MemoryCgroup cg;
  cg.version_ = version;
  cg.limit_ = limit_bytes;
  const std::string dir = parent + "/deltafin-" + std::to_string(::getpid());
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Error(dir + ": cannot create a memory cgroup (" + std::strerror(errno) +
                         "); run as root or in a delegated cgroup, or pass --no-memory-limit");
  }
  cg.path_ = dir;
  if (version == 1) {
    DF_RETURN_IF_ERROR(WriteText(dir + "/memory.limit_in_bytes", std::to_string(limit_bytes)));
  } else {
    DF_RETURN_IF_ERROR(WriteText(dir + "/memory.max", std::to_string(limit_bytes)));
    (void)WriteText(dir + "/memory.swap.max", "0");
  }
  return cg;
}

MemoryCgroup::MemoryCgroup(MemoryCgroup&& other) noexcept
    : path_(std::exchange(other.path_, "")), limit_(other.limit_), version_(other.version_) {}

MemoryCgroup& MemoryCgroup::operator=(MemoryCgroup&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) ::rmdir(path_.c_str());
    path_ = std::exchange(other.path_, "");
    limit_ = other.limit_;
    version_ = other.version_;
  }
  return *this;
}

MemoryCgroup::~MemoryCgroup() {
  if (!path_.empty()) ::rmdir(path_.c_str());
}

Status MemoryCgroup::AddProcess(pid_t pid) const {
  return WriteText(path_ + "/cgroup.procs", std::to_string(pid));
}

uint64_t MemoryCgroup::PeakBytes() const {
  return ReadNumber(path_ + (version_ == 1 ? "/memory.max_usage_in_bytes" : "/memory.peak"));
}

bool DropPageCache() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3";
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace deltafin::cli
