#include "weights/io_scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace deltafin {

IoScheduler::IoScheduler(int depth, int lanes)
    : depth_(std::clamp(depth, 1, kMaxThreads)), lanes_(std::clamp(lanes, 1, kMaxLanes)) {
  const int n = std::min(depth_ * lanes_, kMaxThreads);
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

uint32_t IoScheduler::FreeLanesLocked() const {
  uint32_t free = 0;
  for (int l = 0; l < lanes_; ++l) free |= in_flight_[l] < depth_ ? (1u << l) : 0u;
  return free;
}

void IoScheduler::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stop_) return;
    int chosen = -1;
    int64_t ticket = 0;
    int lane = 0;
    // A full lane is not offered; the thread that ends one of its reads looks again, so a read
    // skipped for a full lane is taken as soon as the lane has room.
    const uint32_t free = FreeLanesLocked();
    for (int p = 0; p < kIoPriorities && chosen < 0 && free != 0; ++p) {
      for (int q = 0; q < num_queues_ && chosen < 0; ++q) {
        if (queues_[q]->TakeOnLane(static_cast<IoPriority>(p), free, &ticket, &lane)) chosen = q;
      }
    }
    if (chosen < 0) {
      const uint64_t seen = generation_;
      work_.wait(lock, [&] { return stop_ || generation_ != seen; });
      continue;
    }
    DF_CHECK(lane >= 0 && lane < lanes_ && (free & (1u << lane)) != 0,
             "an I/O queue took a read for lane %d, which has no room", lane);
    IoQueue* queue = queues_[chosen];
    ++running_[chosen];
    ++in_flight_[lane];
    lock.unlock();
    queue->Run(ticket);
    lock.lock();
    --in_flight_[lane];
    // Detach may have moved the queue to another index meanwhile: find it again.
    int i = 0;
    while (queues_[i] != queue) ++i;
    if (--running_[i] == 0) idle_.notify_all();
  }
}

void IoSchedulerLink::Attach(IoQueue* queue, IoScheduler* shared, int depth, int lanes) {
  if (shared == nullptr) {
    own_ = std::make_unique<IoScheduler>(depth, lanes);
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
