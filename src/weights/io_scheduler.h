// IoScheduler: one pool of reader threads for every read the engine makes of the model files —
// streamed spine groups and routed experts alike — taken in a fixed order of priority, so neither
// starves the other and the read the pass is about to wait on goes first (docs/STREAMING.md).
//
// Each reader of the model (ExpertStreamer, SpineRing) is an IoQueue: it keeps its own queue of
// reads and its own bookkeeping, and hands the scheduler one read at a time. A free thread asks
// the queues, in priority order, for a read:
//   kExpertDemand  experts the current MoE layer needs and does not have (the pass waits on them)
//   kSpine         the spine groups next in the ring (the pass needs them within a layer or two)
//   kExpertGuess   the router lookahead's guesses for the next layer
// and runs it outside every lock. A read in flight is never interrupted: a demand read that
// arrives while every thread reads a 1 MiB spine chunk waits for the first of them to finish.
// Neither Take nor Run allocates, so decode stays allocation-free.
//
// Lanes: each drive the model's bytes are read from (a spread model's drive folders, lane 0 the
// model folder; docs/STREAMING.md "Several drives") is a lane with its own queue depth, the most
// reads in flight on it. A queue is offered only the lanes with room and says which lane the read
// it hands out goes to; the pool has a thread for every lane's full depth (up to kMaxThreads). So
// a slow or stalled drive holds at most its own depth of threads, and reads that can go to another
// drive are taken past the reads waiting for it, in the same priority order.
//
// Lock order: the scheduler's mutex, then a queue's own. A queue therefore calls Notify() only
// with its own mutex released.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace deltafin {

enum class IoPriority : uint8_t { kExpertDemand = 0, kSpine = 1, kExpertGuess = 2 };
inline constexpr int kIoPriorities = 3;

class IoQueue {
 public:
  virtual ~IoQueue() = default;
  // Takes the oldest queued read of `priority`, marking it in flight, and names it in *ticket
  // (the queue's own identifier); false when there is none. Called with the scheduler's mutex
  // held: must not call back into the scheduler.
  virtual bool Take(IoPriority priority, int64_t* ticket) = 0;
  // Like Take, for a read that goes to a lane with room: bit l of `free_lanes` is set when lane l
  // may take another read; *lane names the lane the read goes to. Queues whose reads all go to
  // one drive keep this default: lane 0.
  virtual bool TakeOnLane(IoPriority priority, uint32_t free_lanes, int64_t* ticket, int* lane) {
    if ((free_lanes & 1u) == 0) return false;
    *lane = 0;
    return Take(priority, ticket);
  }
  // Performs the read taken as `ticket`, on a scheduler thread, with no scheduler lock held.
  virtual void Run(int64_t ticket) = 0;
};

class IoScheduler {
 public:
  static constexpr int kMaxThreads = 64;
  static constexpr int kMaxLanes = 32;  // the model folder and up to 31 drive folders
  // `lanes` lanes of `depth` reads in flight each, on depth · lanes threads (at most kMaxThreads).
  explicit IoScheduler(int depth, int lanes = 1);
  ~IoScheduler();  // stops the threads; every queue must be detached by then
  IoScheduler(const IoScheduler&) = delete;
  IoScheduler& operator=(const IoScheduler&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }
  int lanes() const { return lanes_; }
  int depth() const { return depth_; }
  // Adds a queue (at most kMaxQueues). Reads it queued before attaching are taken after the
  // next Notify.
  void Attach(IoQueue* queue);
  // Removes a queue and waits until no thread is inside its Take or Run; its queued reads are
  // simply never taken.
  void Detach(IoQueue* queue);
  // A queue has new reads.
  void Notify();

 private:
  static constexpr int kMaxQueues = 8;
  void Loop();
  uint32_t FreeLanesLocked() const;

  const int depth_, lanes_;
  std::mutex mu_;
  std::condition_variable work_;  // threads: generation_ moved on, or stop_
  std::condition_variable idle_;  // Detach: a queue's running count fell to zero
  uint64_t generation_ = 0;
  bool stop_ = false;
  IoQueue* queues_[kMaxQueues] = {};
  int running_[kMaxQueues] = {};  // threads inside Run of each queue
  int num_queues_ = 0;
  int in_flight_[kMaxLanes] = {};  // reads running on each lane
  std::vector<std::thread> threads_;
};

// A queue's place on a scheduler: the engine's shared one, or one of its own when it is used alone
// (tests, tools).
class IoSchedulerLink {
 public:
  // Attaches `queue` to `shared`, or when that is null to a new scheduler of `lanes` lanes of
  // `depth` reads each.
  void Attach(IoQueue* queue, IoScheduler* shared, int depth, int lanes = 1);
  IoScheduler* scheduler() const { return scheduler_; }
  // Detaches the queue, so no thread is inside its Take or Run any more, and stops a scheduler of
  // its own. The queue's destructor calls it before freeing what its reads write into.
  void Detach();
  // The queue has new reads (call with the queue's own mutex released).
  void Notify() { scheduler_->Notify(); }

 private:
  IoQueue* queue_ = nullptr;
  IoScheduler* scheduler_ = nullptr;
  std::unique_ptr<IoScheduler> own_;
};

}  // namespace deltafin
