// AdviseWillNeed (io/mapped_file.h): the pages covering an unaligned range of a file mapping are
// read into the page cache without being touched; that is what lets a wave start reading all its
// embedding rows at once. Skipped where the file cannot be dropped from the page cache first
// (tmpfs keeps every page in RAM), since the test would then prove nothing.
#include "io/mapped_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "unit/test_files.h"

namespace deltafin {
namespace {

constexpr size_t kPages = 64;

std::vector<bool> Resident(const MappedFile& f, size_t page) {
  std::vector<unsigned char> v(f.size() / page);
  std::vector<bool> out(v.size());
#if defined(__APPLE__)
  if (::mincore(const_cast<uint8_t*>(f.data()), f.size(), reinterpret_cast<char*>(v.data())) != 0)
#else
  if (::mincore(const_cast<uint8_t*>(f.data()), f.size(), v.data()) != 0)
#endif
    return out;
  for (size_t p = 0; p < v.size(); ++p) out[p] = (v[p] & 1) != 0;
  return out;
}

TEST(MappedFile, AdviseWillNeedReadsTheCoveringPages) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  testing::ScopedTempDir dir;
  const std::string path = dir.Join("pages.bin");
  {
    std::vector<uint8_t> bytes(kPages * page);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
    testing::WriteBinaryFile(path, bytes);
  }
  {
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ::fsync(fd);
#if defined(POSIX_FADV_DONTNEED)
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
#endif
    ::close(fd);
  }
  auto mapped = MappedFile::Open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  const MappedFile& f = *mapped;
  f.AdviseRandomAccess();
  for (bool r : Resident(f, page)) {
    if (r) GTEST_SKIP() << "the page cache keeps this file (tmpfs?): nothing to observe";
  }
  // Bytes [10 pages + 100, 13 pages + 100): pages 10..13.
  AdviseWillNeed(f.data() + 10 * page + 100, 3 * page);
  AdviseWillNeed(f.data() + 40 * page, 0);  // nothing
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::vector<bool> r = Resident(f, page);
  while (!(r[10] && r[11] && r[12] && r[13]) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    r = Resident(f, page);
  }
  for (size_t p = 10; p <= 13; ++p) EXPECT_TRUE(r[p]) << "page " << p;
  EXPECT_FALSE(r[40]) << "a zero-byte range read a page";
  // Memory that is no file mapping: ignored.
  std::vector<uint8_t> heap(3 * page);
  AdviseWillNeed(heap.data() + 1, heap.size() - 1);
}

}  // namespace
}  // namespace deltafin
