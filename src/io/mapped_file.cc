#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

namespace deltafin {

Result<MappedFile> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return Status::Error(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error(path + ": not a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Status::Error(path + ": cannot map: " + std::strerror(err));
    }
    file.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::AdviseRandomAccess() const {
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_RANDOM);
}

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

Result<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::Error(path + ": read error");
  return ss.str();
}

void AdviseWillNeed(const void* begin, size_t bytes) {
  if (bytes == 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  // Back to the start of the page that holds `begin`.
  const size_t into_page = reinterpret_cast<uintptr_t>(begin) % page;
  auto* first = const_cast<uint8_t*>(static_cast<const uint8_t*>(begin)) - into_page;
  ::madvise(first, bytes + into_page, MADV_WILLNEED);
}

size_t PageInMappedRange(const uint8_t* begin, size_t bytes, unsigned char* residency) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* addr = const_cast<uint8_t*>(begin);
#if defined(__APPLE__)
  if (::mincore(addr, bytes, reinterpret_cast<char*>(residency)) != 0) return 0;
#else
  if (::mincore(addr, bytes, residency) != 0) return 0;
#endif
  const size_t pages = bytes / page;
  size_t absent = 0;
  for (size_t p = 0; p < pages; ++p) absent += (residency[p] & 1) == 0;
  if (absent == 0) return 0;
  ::madvise(addr, bytes, MADV_WILLNEED);
  unsigned sink = 0;
  for (size_t p = 0; p < pages; ++p) {
    if ((residency[p] & 1) == 0)
      sink += *reinterpret_cast<const volatile uint8_t*>(begin + p * page);
  }
  static_cast<void>(sink);
  return absent;
}

}  // namespace deltafin
