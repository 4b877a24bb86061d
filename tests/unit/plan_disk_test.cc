// `plan --drive`'s measuring helpers (cli/plan_disk.h) on a plain folder: MeasureDrive writes a
// probe file, reads expert-size spans from it over queue depths and removes it, also when the
// folder cannot take it; ProbeFolderProblem names what is wrong with a folder; SameDeviceAs finds
// a folder on the device of another. The test folders share one device, so MeasureDrive is
// called directly, past the same-device check `plan` makes first.
#include "cli/plan_disk.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "unit/test_files.h"

namespace deltafin::cli {
namespace {

using deltafin::testing::ScopedTempDir;
namespace fs = std::filesystem;

constexpr uint64_t kSpan = 1ull << 20;  // an expert of 1 MiB

TEST(PlanDiskTest, MeasureDriveReadsOverDepthsAndRemovesItsProbeFile) {
  ScopedTempDir drive;
  auto measured = MeasureDrive(drive.path(), kSpan, {.quick = true, .io_threads = 4});
  ASSERT_TRUE(measured.ok()) << measured.status().message();
  // --quick measures depth 1 and the engine's depth (--io-threads), whose rate is the one used.
  ASSERT_EQ(measured->depths.size(), 2u);
  EXPECT_EQ(measured->depths[0].depth, 1);
  EXPECT_EQ(measured->depths[1].depth, 4);
  for (const DepthResult& d : measured->depths) EXPECT_GT(d.bps, 0) << d.depth;
  EXPECT_EQ(measured->bps, measured->depths[1].bps);
  EXPECT_GE(measured->cpu_s_per_byte, 0);
  EXPECT_TRUE(fs::is_empty(drive.path())) << "the probe file was left behind";
}

TEST(PlanDiskTest, MeasureDepthsWithoutQuickTakesFourDepths) {
  ScopedTempDir dir;
  const std::string file = dir.Join("experts.bin");
  {
    std::ofstream out(file, std::ios::binary);
    const std::string block(kSpan, 'x');
    for (int i = 0; i < 8; ++i) out << block;
  }
  // Two depths coincide (--io-threads 2): each is measured once.
  auto sweep = MeasureDepths({file}, kSpan, {.quick = false, .io_threads = 2}, 7);
  ASSERT_TRUE(sweep.ok()) << sweep.status().message();
  ASSERT_EQ(sweep->depths.size(), 3u);
  EXPECT_EQ(sweep->depths[0].depth, 1);
  EXPECT_EQ(sweep->depths[1].depth, 2);
  EXPECT_EQ(sweep->depths[2].depth, 4);
  EXPECT_EQ(sweep->bps, sweep->depths[1].bps);
}

TEST(PlanDiskTest, ProbeFolderProblemNamesTheFolder) {
  ScopedTempDir dir;
  EXPECT_FALSE(ProbeFolderProblem(dir.path(), kSpan).has_value());
  EXPECT_TRUE(fs::is_empty(dir.path())) << "the write test was left behind";

  const std::string missing = dir.Join("no-such-drive");
  auto problem = ProbeFolderProblem(missing, kSpan);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find(missing + ": no such directory"), std::string::npos) << *problem;

  const std::string file = dir.Join("a-file");
  std::ofstream(file) << "x";
  problem = ProbeFolderProblem(file, kSpan);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("is not a directory"), std::string::npos) << *problem;

  // More than any disk here has free.
  problem = ProbeFolderProblem(dir.path(), 1ull << 62);
  ASSERT_TRUE(problem.has_value());
  EXPECT_NE(problem->find("too little free space"), std::string::npos) << *problem;
}

// A folder without write permission (root may write there: then only sysfs, which refuses even
// root) is refused by the check and by MeasureDrive, which leaves nothing behind.
TEST(PlanDiskTest, UnwritableFolderIsRefusedAndLeftAsItWas) {
  ScopedTempDir dir;
  const std::string locked = dir.Join("locked");
  ASSERT_EQ(::mkdir(locked.c_str(), 0500), 0);
  std::vector<std::string> unwritable;
  if (::access(locked.c_str(), W_OK) != 0) unwritable.push_back(locked);
  if (fs::is_directory("/sys")) unwritable.push_back("/sys");
  if (unwritable.empty()) GTEST_SKIP() << "no folder here refuses this user's writes";
  for (const std::string& folder : unwritable) {
    auto problem = ProbeFolderProblem(folder, kSpan);
    ASSERT_TRUE(problem.has_value()) << folder;
    EXPECT_NE(problem->find(folder + ": not writable"), std::string::npos) << *problem;
    auto measured = MeasureDrive(folder, kSpan, {.quick = true, .io_threads = 2});
    ASSERT_FALSE(measured.ok()) << folder;
    EXPECT_NE(measured.status().message().find("--drive " + folder), std::string::npos)
        << measured.status().message();
  }
  EXPECT_TRUE(fs::is_empty(locked));
}

TEST(PlanDiskTest, SameDeviceAsFindsTheFirstFolderOnTheDevice) {
  ScopedTempDir a, b;
  const std::string inside = a.Join("sub");
  fs::create_directory(inside);
  // Every test folder is on one device: the first earlier folder is named.
  auto same = SameDeviceAs(inside, {b.path(), a.path()});
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(*same, b.path());
  // /proc is a device of its own.
  EXPECT_FALSE(SameDeviceAs(inside, {"/proc"}).has_value());
  EXPECT_FALSE(SameDeviceAs(a.Join("missing"), {a.path()}).has_value());
  EXPECT_FALSE(SameDeviceAs(inside, {}).has_value());
}

}  // namespace
}  // namespace deltafin::cli
