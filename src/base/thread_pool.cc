#include "base/thread_pool.h"

#include <cstdio>
#include <cstdlib>
#include <memory>

#if defined(__linux__)
#include <sched.h>
#endif

namespace deltafin {

namespace {

// Busy-wait iterations before a thread sleeps. Decode issues matrix calls back to back, so a short
// spin keeps the wake-up latency off the critical path; beyond it the thread sleeps (no CPU cost).
constexpr int kSpinIterations = 20000;

thread_local bool t_in_worker = false;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  workers_.reserve(static_cast<size_t>(num_threads_ - 1));
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> sleep_lock(sleep_mutex_);
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Run(Fn fn, void* ctx) {
  if (num_threads_ == 1 || t_in_worker) {
    for (int i = 0; i < num_threads_; ++i) fn(ctx, i, num_threads_);
    return;
  }
  std::lock_guard<std::mutex> lock(run_mutex_);
  fn_ = fn;
  ctx_ = ctx;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> sleep_lock(sleep_mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_cv_.notify_all();
  // The caller's part runs as a worker's does: a Run from inside it (a kernel called by a task
  // that the pool spread over experts) runs inline instead of waiting for the pool it holds.
  t_in_worker = true;
  fn(ctx, 0, num_threads_);
  t_in_worker = false;
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations) {
      CpuRelax();
    } else {
      std::unique_lock<std::mutex> sleep_lock(sleep_mutex_);
      done_cv_.wait(sleep_lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
  }
}

void ThreadPool::WorkerLoop(int index) {
  t_in_worker = true;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int spins = 0; g == seen && spins < kSpinIterations; ++spins) {
      CpuRelax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> sleep_lock(sleep_mutex_);
      wake_cv_.wait(sleep_lock, [&] {
        g = generation_.load(std::memory_order_acquire);
        return g != seen;
      });
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    fn_(ctx_, index, num_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Lock so the caller cannot miss the notification between its check and its wait.
      std::lock_guard<std::mutex> sleep_lock(sleep_mutex_);
      done_cv_.notify_one();
    }
  }
}

int AvailableCpus() {
  // DF_THREADS overrides the detection (CI, emulators, sharing a machine).
  if (const char* env = std::getenv("DF_THREADS")) {
    const int v = std::atoi(env);
    if (v > 0) return v;
  }
  int n = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) n = CPU_COUNT(&set);
  // cgroup v2 quota: "max 100000" or "<quota> <period>".
  if (std::FILE* f = std::fopen("/sys/fs/cgroup/cpu.max", "r")) {
    long long quota = 0, period = 0;
    if (std::fscanf(f, "%lld %lld", &quota, &period) == 2 && quota > 0 && period > 0) {
      const long long cpus = (quota + period - 1) / period;
      if (cpus < n) n = static_cast<int>(cpus);
    }
    std::fclose(f);
  }
#endif
  return n < 1 ? 1 : n;
}

namespace {

std::mutex g_pool_mutex;
std::unique_ptr<ThreadPool> g_pool_owner;
std::atomic<ThreadPool*> g_pool{nullptr};
int g_requested_threads = 0;

}  // namespace

ThreadPool& DefaultPool() {
  if (ThreadPool* p = g_pool.load(std::memory_order_acquire)) return *p;
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  if (!g_pool_owner) {
    g_pool_owner = std::make_unique<ThreadPool>(g_requested_threads > 0 ? g_requested_threads
                                                                        : AvailableCpus());
    g_pool.store(g_pool_owner.get(), std::memory_order_release);
  }
  return *g_pool_owner;
}

int DefaultThreadCount() {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  return g_requested_threads > 0 ? g_requested_threads : AvailableCpus();
}

void SetDefaultThreadCount(int n) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  g_requested_threads = n > 0 ? n : 0;
  g_pool.store(nullptr, std::memory_order_release);
  g_pool_owner.reset();
  g_pool_owner =
      std::make_unique<ThreadPool>(g_requested_threads > 0 ? g_requested_threads : AvailableCpus());
  g_pool.store(g_pool_owner.get(), std::memory_order_release);
}

}  // namespace deltafin
