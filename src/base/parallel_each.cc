#include "base/parallel_each.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace deltafin {

Status ForEachOnThreads(int threads, size_t count,
                        const std::function<Status(size_t index, int thread)>& job) {
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  size_t failed_at = count;
  Status error = Status::Ok();
  auto run = [&](int thread) {
    for (size_t i = next++; i < count; i = next++) {
      Status st = job(i, thread);
      if (st.ok()) continue;
      std::lock_guard<std::mutex> lock(error_mutex);
      if (i < failed_at) {
        failed_at = i;
        error = std::move(st);
      }
      next = count;
    }
  };
  const size_t used =
      std::min(static_cast<size_t>(std::max(threads, 1)), std::max<size_t>(count, 1));
  std::vector<std::thread> pool;
  pool.reserve(used - 1);
  for (size_t t = 1; t < used; ++t) pool.emplace_back(run, static_cast<int>(t));
  run(0);
  for (auto& t : pool) t.join();
  return error;
}

}  // namespace deltafin
