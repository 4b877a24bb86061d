#include "io/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace deltafin {

namespace {
std::string Errno() { return std::strerror(errno); }
}  // namespace

Status WriteAllToFd(int fd, const void* data, size_t size, const std::string& path) {
  const auto* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Error(path + ": write failed: " + Errno());
    if (n == 0) return Status::Error(path + ": write failed: no progress");
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status WriteFileContents(const std::string& path, const void* data, size_t size, bool sync,
                         int mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Status::Error(path + ": cannot create: " + Errno());
  Status st = WriteAllToFd(fd, data, size, path);
  if (st.ok() && sync && ::fsync(fd) != 0) st = Status::Error(path + ": fsync failed: " + Errno());
  if (::close(fd) != 0 && st.ok()) st = Status::Error(path + ": close failed: " + Errno());
  return st;
}

Status WriteFileDurably(const std::string& path, const void* data, size_t size,
                        const DurableWriteOptions& options) {
  const std::string tmp = path + options.temp_suffix;
  Status st = WriteFileContents(tmp, data, size, options.sync, options.mode);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  if (options.before_rename) options.before_rename(path);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = Errno();
    ::unlink(tmp.c_str());
    return Status::Error(path + ": cannot rename into place: " + err);
  }
  if (options.sync) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    SyncDirectory(parent.empty() ? "." : parent.string());
  }
  return Status::Ok();
}

Status AppendFileDurably(const std::string& path, std::string_view text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(path + ": cannot open: " + Errno());
  Status st = WriteAllToFd(fd, text.data(), text.size(), path);
  if (st.ok() && ::fsync(fd) != 0) st = Status::Error(path + ": fsync failed: " + Errno());
  if (::close(fd) != 0 && st.ok()) st = Status::Error(path + ": close failed: " + Errno());
  return st;
}

Status SyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": cannot open to sync: " + Errno());
  const int rc = ::fsync(fd);
  const std::string err = rc != 0 ? Errno() : "";
  ::close(fd);
  if (rc != 0) return Status::Error(path + ": fsync failed: " + err);
  return Status::Ok();
}

void SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace deltafin
