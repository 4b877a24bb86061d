#include "weights/io_scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace deltafin {

IoScheduler::IoScheduler(int threads) {
  const int n = std::clamp(threads, 1, kMaxThreads);
  threads_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { Loop(); });
}

IoScheduler::~IoScheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  for (auto& t : threads_) t.join();
}

void IoScheduler::Attach(IoQueue* queue) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    DF_CHECK(num_queues_ < kMaxQueues, "more than %d I/O queues", kMaxQueues);
    queues_[num_queues_] = queue;
    running_[num_queues_] = 0;
    ++num_queues_;
    ++generation_;
  }
  work_.notify_all();
}

void IoScheduler::Detach(IoQueue* queue) {
  std::unique_lock<std::mutex> lock(mu_);
  int i = 0;
  while (i < num_queues_ && queues_[i] != queue) ++i;
  if (i == num_queues_) return;
  idle_.wait(lock, [&] { return running_[i] == 0; });
  // Threads index queues only under the mutex, so moving the last one into place is safe.
  --num_queues_;
  queues_[i] = queues_[num_queues_];
  running_[i] = running_[num_queues_];
  queues_[num_queues_] = nullptr;
  running_[num_queues_] = 0;
}

void IoScheduler::Notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
  }
  work_.notify_all();
}

void IoScheduler::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stop_) return;
    int chosen = -1;
    int64_t ticket = 0;
    for (int p = 0; p < kIoPriorities && chosen < 0; ++p) {
      for (int q = 0; q < num_queues_ && chosen < 0; ++q) {
        if (queues_[q]->Take(static_cast<IoPriority>(p), &ticket)) chosen = q;
      }
    }
    if (chosen < 0) {
      const uint64_t seen = generation_;
      work_.wait(lock, [&] { return stop_ || generation_ != seen; });
      continue;
    }
    IoQueue* queue = queues_[chosen];
    ++running_[chosen];
    lock.unlock();
    queue->Run(ticket);
    lock.lock();
    // Detach may have moved the queue to another index meanwhile: find it again.
    int i = 0;
    while (queues_[i] != queue) ++i;
    if (--running_[i] == 0) idle_.notify_all();
  }
}

void IoSchedulerLink::Attach(IoQueue* queue, IoScheduler* shared, int threads) {
  if (shared == nullptr) {
    own_ = std::make_unique<IoScheduler>(threads);
    shared = own_.get();
  }
  queue_ = queue;
  scheduler_ = shared;
  scheduler_->Attach(queue);
}

void IoSchedulerLink::Detach() {
  if (scheduler_ != nullptr) scheduler_->Detach(queue_);
  scheduler_ = nullptr;
  own_.reset();
}

}  // namespace deltafin
