// DirectFile: positional reads of large spans that bypass the page cache.
//
// Routed experts are read once per use and are far larger in total than RAM, so caching them in
// the kernel's page cache only evicts things that matter (the spine). Linux: O_DIRECT, which needs
// the file offset, the length and the buffer address aligned to the device's logical block; we
// read the aligned superset of the requested span into an aligned buffer and hand back a pointer
// to the first requested byte. macOS: F_NOCACHE (no alignment rules). Filesystems that refuse
// O_DIRECT (tmpfs) fall back to buffered reads followed by POSIX_FADV_DONTNEED.
//
//   buffer: [ pad < kIoAlignment | requested span ... | pad < kIoAlignment ]
//            ^ aligned offset     ^ returned pointer
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace deltafin {

enum class ReadMode { kDirect, kBuffered };

const char* ReadModeName(ReadMode mode);

class DirectFile {
 public:
  // Alignment of offsets, lengths and buffers for O_DIRECT (covers 512 B and 4 KiB devices).
  static constexpr uint64_t kIoAlignment = 4096;
  // Buffer bytes needed to read any span of `length` bytes, whatever its offset.
  static constexpr size_t BufferBytesFor(uint64_t length) {
    return static_cast<size_t>((length + 2 * kIoAlignment - 1) / kIoAlignment * kIoAlignment);
  }

  // Opens `path` for reading. kDirect falls back to kBuffered where the filesystem refuses it
  // (see mode()).
  static Result<DirectFile> Open(const std::string& path, ReadMode mode);

  DirectFile() = default;
  DirectFile(const DirectFile&) = delete;
  DirectFile& operator=(const DirectFile&) = delete;
  DirectFile(DirectFile&& other) noexcept;
  DirectFile& operator=(DirectFile&& other) noexcept;
  ~DirectFile();

  // Reads [offset, offset + length) into `buffer` (kIoAlignment-aligned, `capacity` bytes, at
  // least BufferBytesFor(length)); returns the address of byte `offset` inside `buffer`. A short
  // read (the file ends early) or an I/O error is an error naming the file, offset and length.
  Result<const uint8_t*> ReadSpan(uint64_t offset, uint64_t length, uint8_t* buffer,
                                  size_t capacity) const;

  ReadMode mode() const { return mode_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Close();
  int fd_ = -1;
  ReadMode mode_ = ReadMode::kBuffered;
  uint64_t size_ = 0;
  std::string path_;
};

}  // namespace deltafin
