// ForEachOnThreads (base/parallel_each.h): every job runs once on a thread in range, and a failure
// reports the lowest failing index whatever the thread timing.
#include "base/parallel_each.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

namespace deltafin {
namespace {

TEST(ForEachOnThreads, RunsEveryJobOnceOnAThreadInRange) {
  for (int threads : {0, 1, 3, 8}) {
    std::vector<std::atomic<int>> runs(100);
    std::atomic<bool> bad_thread{false};
    const Status st = ForEachOnThreads(threads, runs.size(), [&](size_t i, int thread) {
      if (thread < 0 || thread >= std::max(threads, 1)) bad_thread = true;
      ++runs[i];
      return Status::Ok();
    });
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_FALSE(bad_thread);
    for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
  }
  EXPECT_TRUE(ForEachOnThreads(4, 0, [](size_t, int) { return Status::Error("never"); }).ok());
}

TEST(ForEachOnThreads, ReportsTheLowestFailingIndexAndStopsTakingJobs) {
  for (int round = 0; round < 20; ++round) {
    std::atomic<size_t> ran{0};
    const Status st = ForEachOnThreads(4, 1000, [&](size_t i, int) {
      ++ran;
      if (i == 37 || i == 40 || i == 900) return Status::Error("job " + std::to_string(i));
      return Status::Ok();
    });
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.message(), "job 37");
    EXPECT_LT(ran.load(), 1000u);  // job 900 and most others were never taken
  }
}

}  // namespace
}  // namespace deltafin
