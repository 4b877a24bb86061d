// DirectFile (aligned-superset reads, buffered fallback, short reads) and the memory planner
// (placement decisions, cache sizing, refusals with numbers, size parsing).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "io/direct_file.h"
#include "unit/test_files.h"
#include "weights/memory_plan.h"

namespace deltafin {
namespace {

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + 7) ^ (i >> 9));
  return v;
}

void ExpectReadsMatch(const std::string& path, ReadMode mode) {
  const auto bytes = Pattern(300'000);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }
  auto file = DirectFile::Open(path, mode);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const size_t cap = DirectFile::BufferBytesFor(70'000);
  auto* buffer = static_cast<uint8_t*>(std::aligned_alloc(DirectFile::kIoAlignment, cap));
  // Unaligned starts, lengths, and a span that ends at the end of the file.
  for (uint64_t offset : {0ull, 1ull, 4095ull, 4096ull, 12'345ull, 230'000ull}) {
    const uint64_t length = std::min<uint64_t>(70'000, bytes.size() - offset);
    auto got = file->ReadSpan(offset, length, buffer, cap);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(std::memcmp(*got, bytes.data() + offset, length), 0) << "offset " << offset;
  }
  // Past the end: a short read, named.
  auto past = file->ReadSpan(bytes.size() - 1000, 5000, buffer, cap);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find("short read"), std::string::npos);
  EXPECT_NE(past.status().message().find(path), std::string::npos);
  // A buffer that is too small is refused, not overrun.
  EXPECT_FALSE(file->ReadSpan(0, 70'000, buffer, 4096).ok());
  std::free(buffer);
}

TEST(DirectFile, DirectReadsReturnTheRequestedBytes) {
  testing::ScopedTempDir dir;
  ExpectReadsMatch(dir.Join("data.bin"), ReadMode::kDirect);
}

TEST(DirectFile, BufferedReadsReturnTheRequestedBytes) {
  testing::ScopedTempDir dir;
  ExpectReadsMatch(dir.Join("data.bin"), ReadMode::kBuffered);
}

TEST(DirectFile, MissingFileIsAnError) {
  auto f = DirectFile::Open("/nonexistent/deltafin/file", ReadMode::kDirect);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("/nonexistent/deltafin/file"), std::string::npos);
}

MemoryNeeds Needs() {
  MemoryNeeds n;
  n.spine_bytes = 1000 << 20;
  n.all_expert_bytes = 16000ull << 20;
  n.session_bytes = 100 << 20;
  n.min_expert_cache = 10 << 20;
  n.largest_layer_spine = 20 << 20;
  n.spine_groups.assign(50, 20 << 20);  // 49 layers and the lm_head
  return n;
}

TEST(MemoryPlan, EverythingFitsMapsTheExperts) {
  auto p = PlanMemory(Needs(), {32ull << 30, "test"}, ExpertPlacement::kAuto, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->experts_streamed);
  EXPECT_TRUE(p->spine_resident);
}

TEST(MemoryPlan, SpineResidentStreamsExpertsWithTheRestAsCache) {
  auto p = PlanMemory(Needs(), {2000ull << 20, "test"}, ExpertPlacement::kAuto, 0);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->experts_streamed);
  EXPECT_TRUE(p->spine_resident);
  EXPECT_EQ(p->expert_cache_bytes, (2000ull - 100 - 1000) << 20);
  EXPECT_LE(p->needs.session_bytes + p->needs.spine_bytes + p->expert_cache_bytes, 2000ull << 20);
}

// A ring slot: the group plus 1/64 and 256 KiB for alignment and small tensors.
constexpr uint64_t kSlot = (20ull << 20) + (20ull << 20) / 64 + (256ull << 10);

TEST(MemoryPlan, SmallBudgetStreamsTheSpineAndPinsWhatFits) {
  auto p = PlanMemory(Needs(), {500ull << 20, "test"}, ExpertPlacement::kAuto, 0);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(p->experts_streamed);
  EXPECT_FALSE(p->spine_resident);
  EXPECT_EQ(p->spine_ring_depth, 2);
  EXPECT_EQ(p->spine_ring_slot_bytes, kSlot);
  // After session, smallest cache and ring: (500 MiB - 110 MiB - 2 slots) / slot groups pinned.
  const uint64_t pinned = ((500ull << 20) - (110ull << 20) - 2 * kSlot) / kSlot;
  EXPECT_EQ(pinned, 16u);
  EXPECT_EQ(p->spine_pinned_bytes, pinned * (20ull << 20));
  EXPECT_EQ(p->spine_streamed_bytes, (50 - pinned) * (20ull << 20));
  EXPECT_EQ(std::count(p->spine_pinned.begin(), p->spine_pinned.end(), true), 16);
  // The leftover goes to the expert cache, and nothing exceeds the budget.
  EXPECT_EQ(p->expert_cache_bytes, (500ull << 20) - (100ull << 20) - (pinned + 2) * kSlot);
  EXPECT_GE(p->expert_cache_bytes, p->needs.min_expert_cache);
  EXPECT_NE(p->Describe().find("16 of 49 layers, 320.00 MiB"), std::string::npos) << p->Describe();
}

TEST(MemoryPlan, DeeperRingPinsLess) {
  MemoryNeeds n = Needs();
  n.spine_ring_depth = 4;
  auto p = PlanMemory(n, {500ull << 20, "test"}, ExpertPlacement::kAuto, 0);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->spine_ring_depth, 4);
  EXPECT_EQ(p->spine_pinned_bytes, 14 * (20ull << 20));
}

TEST(MemoryPlan, TooSmallIsRefusedWithTheNumbers) {
  auto p = PlanMemory(Needs(), {120ull << 20, "--mem-limit"}, ExpertPlacement::kAuto, 0);
  ASSERT_FALSE(p.ok());
  const std::string& m = p.status().message();
  EXPECT_NE(m.find("120.00 MiB"), std::string::npos) << m;
  EXPECT_NE(m.find("--mem-limit"), std::string::npos) << m;
  EXPECT_NE(m.find("ring of 2 layer buffers"), std::string::npos) << m;
}

TEST(MemoryPlan, ExplicitCacheAndPlacement) {
  auto p = PlanMemory(Needs(), {2000ull << 20, "t"}, ExpertPlacement::kStreamed, 50 << 20);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->expert_cache_bytes, 50ull << 20);
  EXPECT_FALSE(PlanMemory(Needs(), {2000ull << 20, "t"}, ExpertPlacement::kStreamed, 1).ok());
  EXPECT_FALSE(
      PlanMemory(Needs(), {2000ull << 20, "t"}, ExpertPlacement::kStreamed, 1ull << 40).ok());
  EXPECT_FALSE(PlanMemory(Needs(), {2000ull << 20, "t"}, ExpertPlacement::kMapped, 0).ok());
  auto forced = PlanMemory(Needs(), {32ull << 30, "t"}, ExpertPlacement::kStreamed, 0);
  ASSERT_TRUE(forced.ok());
  EXPECT_TRUE(forced->experts_streamed);
}

TEST(MemoryPlan, MachineBudgetIsPositiveAndNamesItsSource) {
  auto b = MachineMemoryBudget();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_GT(b->bytes, 0u);
  EXPECT_NE(b->source.find("headroom"), std::string::npos);
}

TEST(MemoryPlan, ParseByteSize) {
  EXPECT_EQ(*ParseByteSize("24G"), 24ull << 30);
  EXPECT_EQ(*ParseByteSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3ull << 29);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("2t"), 2ull << 40);
  for (const char* bad : {"", "G", "-1G", "0", "12Q", "abc", "1e30G"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace deltafin
