// MappedFile: read-only memory map of a whole file (the spine shards, small test models).
// Owns the mapping; moving transfers it. Routed experts of a real K3 are far larger than RAM and
// are meant to be read with positional reads instead (experts/), but mapping is correct for any
// size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace deltafin {

class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Tells the kernel page faults here are random: each fault reads its own page, not the
  // read-around window (madvise MADV_RANDOM; a no-op where unsupported). Explicit readahead
  // (MADV_WILLNEED on a range) still reads that whole range.
  void AdviseRandomAccess() const;

 private:
  void Reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Starts reading the pages that cover [begin, begin + bytes) of a file mapping into the page cache
// and returns without waiting (madvise MADV_WILLNEED over the page-aligned range; a no-op for
// memory that is not a file mapping and where unsupported). Many calls in a row put many reads in
// flight at once, where touching the bytes would fault them in one at a time.
void AdviseWillNeed(const void* begin, size_t bytes);

// Brings the missing pages of a page-aligned range of a file mapping into RAM: mincore() finds
// them, madvise(MADV_WILLNEED) starts readahead over the range, and one byte of each missing page
// is read, which waits for it. `residency` holds at least bytes / page size entries. Returns
// the number of pages that were missing (0 for memory that is not a mapping).
size_t PageInMappedRange(const uint8_t* begin, size_t bytes, unsigned char* residency);

// Reads a whole (small) file into a string: configs, index files, tokenizer files.
Result<std::string> ReadFileToString(const std::string& path);

}  // namespace deltafin
