#include "io/direct_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace deltafin {

const char* ReadModeName(ReadMode mode) {
  return mode == ReadMode::kDirect ? "direct" : "buffered";
}

Result<DirectFile> DirectFile::Open(const std::string& path, ReadMode mode) {
  DirectFile f;
  f.path_ = path;
  f.mode_ = mode;
  int flags = O_RDONLY | O_CLOEXEC;
#if defined(O_DIRECT)
  if (mode == ReadMode::kDirect) flags |= O_DIRECT;
#endif
  f.fd_ = ::open(path.c_str(), flags);
#if defined(O_DIRECT)
  if (f.fd_ < 0 && errno == EINVAL && mode == ReadMode::kDirect) {
    // tmpfs and some network filesystems refuse O_DIRECT.
    f.mode_ = ReadMode::kBuffered;
    f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
#endif
  if (f.fd_ < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
#if defined(__APPLE__)
  if (mode == ReadMode::kDirect && ::fcntl(f.fd_, F_NOCACHE, 1) != 0) f.mode_ = ReadMode::kBuffered;
#endif
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0)
    return Status::Error(path + ": cannot stat: " + std::strerror(errno));
  f.size_ = static_cast<uint64_t>(st.st_size);
  return f;
}

DirectFile::DirectFile(DirectFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      mode_(other.mode_),
      size_(other.size_),
      path_(std::move(other.path_)) {}

DirectFile& DirectFile::operator=(DirectFile&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    mode_ = other.mode_;
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

DirectFile::~DirectFile() { Close(); }

void DirectFile::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<const uint8_t*> DirectFile::ReadSpan(uint64_t offset, uint64_t length, uint8_t* buffer,
                                            size_t capacity) const {
  auto where = [&] {
    return path_ + ": reading " + std::to_string(length) + " bytes at offset " +
           std::to_string(offset);
  };
  if (capacity < BufferBytesFor(length) ||
      reinterpret_cast<uintptr_t>(buffer) % kIoAlignment != 0) {
    return Status::Error(where() + ": buffer too small or misaligned");
  }
  const uint64_t begin = mode_ == ReadMode::kDirect ? offset / kIoAlignment * kIoAlignment : offset;
  const uint64_t end = offset + length;
  // Direct reads ask for whole blocks; the last one may pass the end of the file, which the
  // kernel answers with a short read that still covers `end`.
  const uint64_t ask_end =
      mode_ == ReadMode::kDirect ? (end + kIoAlignment - 1) / kIoAlignment * kIoAlignment : end;
  uint64_t done = 0;
  while (begin + done < end) {
    const ssize_t got = ::pread(fd_, buffer + done, static_cast<size_t>(ask_end - begin - done),
                                static_cast<off_t>(begin + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::Error(where() + ": " + std::strerror(errno));
    }
    if (got == 0) {
      return Status::Error(where() + ": short read, the file ends at " +
                           std::to_string(begin + done) + " (truncated shard?)");
    }
    done += static_cast<uint64_t>(got);
  }
#if defined(POSIX_FADV_DONTNEED)
  if (mode_ == ReadMode::kBuffered) {
    ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length),
                    POSIX_FADV_DONTNEED);
  }
#endif
  return buffer + (offset - begin);
}

}  // namespace deltafin
