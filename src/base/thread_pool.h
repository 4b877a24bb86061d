// ThreadPool: a persistent pool of compute threads for the kernels (static partitioning).
//
// The calling thread takes part: a pool of T threads owns T-1 workers, and Run(fn, ctx) calls
// fn(ctx, i, T) once for every i in [0, T), index 0 on the caller, and returns when all are done.
// Dispatch passes a plain function pointer and a context pointer, so a call never allocates
// (decode must not allocate). Workers spin briefly after a call, then sleep on a condition
// variable, so an idle pool costs no CPU.
//
// Run is meant for one caller at a time (the engine's compute thread); concurrent callers are
// serialised by a mutex. A call from inside a Run (on a worker or on the caller's own part) runs
// inline on that thread: a task spread over the pool may call the kernels, which then use one
// thread each (the MoE block runs a prefill wave's experts side by side this way).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace deltafin {

class ThreadPool {
 public:
  using Fn = void (*)(void* ctx, int index, int count);

  // num_threads >= 1 counts the caller; 1 means "run everything on the caller".
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(ctx, i, num_threads()) for every i in [0, num_threads()).
  void Run(Fn fn, void* ctx);

  // Calls f(begin, end) on disjoint, contiguous, nearly equal parts of [0, n): at most
  // num_threads() parts, each at least `grain` long (except when n < grain). Part i is
  // [n*i/P, n*(i+1)/P), so the partition depends only on n and P.
  template <typename F>
  void ParallelRanges(int64_t n, int64_t grain, const F& f) {
    if (n <= 0) return;
    int64_t parts = grain > 0 ? n / grain : n;
    if (parts > num_threads_) parts = num_threads_;
    if (parts <= 1) {
      f(int64_t{0}, n);
      return;
    }
    struct Ctx {
      const F* f;
      int64_t n, parts;
    } ctx{&f, n, parts};
    Run(
        [](void* c, int index, int) {
          const Ctx& x = *static_cast<const Ctx*>(c);
          if (index >= x.parts) return;
          (*x.f)(x.n * index / x.parts, x.n * (index + 1) / x.parts);
        },
        &ctx);
  }

 private:
  void WorkerLoop(int index);

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;
  Fn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // Sleeping after the spin: workers wait for a new generation, the caller for pending_ == 0.
  std::mutex sleep_mutex_;
  std::condition_variable wake_cv_;
  std::condition_variable done_cv_;
};

// The number of CPUs this process may use: $DF_THREADS when set to a positive number; else the
// affinity mask (Linux), capped by a cgroup v2 CPU quota when one is set;
// std::thread::hardware_concurrency() elsewhere. At least 1.
int AvailableCpus();

// The process-wide pool the kernels use; created on first use with DefaultThreadCount() threads.
ThreadPool& DefaultPool();
// Threads the default pool will have: SetDefaultThreadCount's value, else AvailableCpus().
int DefaultThreadCount();
// Replaces the default pool with one of `n` threads (n <= 0: AvailableCpus()). Call it at startup
// or between computations, never while a kernel runs.
void SetDefaultThreadCount(int n);

}  // namespace deltafin
