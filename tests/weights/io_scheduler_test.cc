// IoScheduler (weights/io_scheduler.h): reads are taken by priority across queues — expert
// demand, then spine, then guesses — and Detach returns only once no thread runs the queue; each
// lane (drive) has its own queue depth, so a stalled lane does not hold up another's reads.
#include "weights/io_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace deltafin {
namespace {

// Records the order its reads ran in. A read named "gate" blocks until Open().
class FakeQueue final : public IoQueue {
 public:
  FakeQueue(std::vector<std::string>* log, std::mutex* log_mu) : log_(log), log_mu_(log_mu) {}
  void Add(IoPriority p, std::string name) {
    std::lock_guard<std::mutex> lock(mu_);
    queued_[static_cast<int>(p)].push_back(std::move(name));
  }
  bool Take(IoPriority p, int64_t* ticket) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto& q = queued_[static_cast<int>(p)];
    if (q.empty()) return false;
    taken_.push_back(q.front());
    q.pop_front();
    *ticket = static_cast<int64_t>(taken_.size()) - 1;
    return true;
  }
  void Run(int64_t ticket) override {
    std::string name;
    {
      std::lock_guard<std::mutex> lock(mu_);
      name = taken_[static_cast<size_t>(ticket)];
    }
    if (name == "gate") {
      started_gate_ = true;
      while (!open_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a read takes time
    std::lock_guard<std::mutex> lock(*log_mu_);
    log_->push_back(name);
  }
  void Open() { open_ = true; }
  bool gate_started() const { return started_gate_; }

 private:
  std::vector<std::string>* log_;
  std::mutex* log_mu_;
  std::mutex mu_;
  std::deque<std::string> queued_[kIoPriorities];
  std::vector<std::string> taken_;
  std::atomic<bool> open_{false}, started_gate_{false};
};

void WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 5000 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(done());
}

TEST(IoScheduler, TakesExpertDemandThenSpineThenGuessesAcrossQueues) {
  std::vector<std::string> log;
  std::mutex log_mu;
  FakeQueue experts(&log, &log_mu), spine(&log, &log_mu);
  IoScheduler scheduler(1);
  scheduler.Attach(&experts);
  scheduler.Attach(&spine);
  // Hold the one thread on a read while every class queues behind it, guesses and spine first.
  spine.Add(IoPriority::kSpine, "gate");
  scheduler.Notify();
  WaitFor([&] { return spine.gate_started(); });
  experts.Add(IoPriority::kExpertGuess, "guess 1");
  spine.Add(IoPriority::kSpine, "spine 1");
  experts.Add(IoPriority::kExpertGuess, "guess 2");
  spine.Add(IoPriority::kSpine, "spine 2");
  experts.Add(IoPriority::kExpertDemand, "demand 1");
  experts.Add(IoPriority::kExpertDemand, "demand 2");
  scheduler.Notify();
  spine.Open();
  WaitFor([&] {
    std::lock_guard<std::mutex> lock(log_mu);
    return log.size() == 7;
  });
  const std::vector<std::string> want = {"gate",    "demand 1", "demand 2", "spine 1",
                                         "spine 2", "guess 1",  "guess 2"};
  EXPECT_EQ(log, want);
  scheduler.Detach(&spine);
  scheduler.Detach(&experts);
}

TEST(IoScheduler, DetachWaitsForTheQueuesReadInFlight) {
  std::vector<std::string> log;
  std::mutex log_mu;
  FakeQueue a(&log, &log_mu), b(&log, &log_mu);
  IoScheduler scheduler(2);
  scheduler.Attach(&a);
  scheduler.Attach(&b);
  a.Add(IoPriority::kSpine, "gate");
  scheduler.Notify();
  WaitFor([&] { return a.gate_started(); });
  std::atomic<bool> detached{false};
  std::thread t([&] {
    scheduler.Detach(&a);
    detached = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(detached);  // a's read is still running
  // The other queue is still served while Detach waits.
  b.Add(IoPriority::kExpertDemand, "b read");
  scheduler.Notify();
  WaitFor([&] {
    std::lock_guard<std::mutex> lock(log_mu);
    return log.size() == 1;
  });
  EXPECT_EQ(log[0], "b read");
  a.Open();
  t.join();
  EXPECT_TRUE(detached);
  // A detached queue is never asked again.
  a.Add(IoPriority::kExpertDemand, "never");
  scheduler.Notify();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::lock_guard<std::mutex> lock(log_mu);
  EXPECT_EQ(log.size(), 2u);  // "b read", then "gate"
  EXPECT_EQ(log.back(), "gate");
  scheduler.Detach(&b);
}

// Reads that each go to one lane; reads of a lane named in Stall() block until Open().
class LaneQueue final : public IoQueue {
 public:
  void Add(int lane, std::string name) {
    std::lock_guard<std::mutex> lock(mu_);
    queued_.emplace_back(lane, std::move(name));
  }
  bool Take(IoPriority p, int64_t* ticket) override {
    int lane = 0;
    return TakeOnLane(p, 1u, ticket, &lane);
  }
  bool TakeOnLane(IoPriority p, uint32_t free, int64_t* ticket, int* lane) override {
    if (p != IoPriority::kExpertDemand) return false;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = queued_.begin(); it != queued_.end(); ++it) {
      if ((free & (1u << it->first)) == 0) continue;
      taken_.push_back(*it);
      queued_.erase(it);
      *ticket = static_cast<int64_t>(taken_.size()) - 1;
      *lane = taken_.back().first;
      return true;
    }
    return false;
  }
  void Run(int64_t ticket) override {
    std::pair<int, std::string> read;
    {
      std::lock_guard<std::mutex> lock(mu_);
      read = taken_[static_cast<size_t>(ticket)];
      started_.push_back(read.second);
    }
    if (read.first == stalled_lane_) {
      while (!open_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_.push_back(read.second);
  }
  void Stall(int lane) { stalled_lane_ = lane; }
  void Open() { open_ = true; }
  std::vector<std::string> started() {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }
  std::vector<std::string> done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::mutex mu_;
  std::deque<std::pair<int, std::string>> queued_;
  std::vector<std::pair<int, std::string>> taken_;
  std::vector<std::string> started_, done_;
  std::atomic<int> stalled_lane_{-1};
  std::atomic<bool> open_{false};
};

TEST(IoScheduler, AStalledLaneHoldsOnlyItsOwnDepth) {
  LaneQueue q;
  IoScheduler scheduler(/*depth=*/2, /*lanes=*/2);
  EXPECT_EQ(scheduler.threads(), 4);
  scheduler.Attach(&q);
  q.Stall(1);
  // Lane 1's reads queue first; with one pool shared by both lanes they would take every thread.
  for (int i = 0; i < 4; ++i) q.Add(1, "slow " + std::to_string(i));
  for (int i = 0; i < 4; ++i) q.Add(0, "fast " + std::to_string(i));
  scheduler.Notify();
  WaitFor([&] { return q.done().size() == 4; });
  for (const auto& name : q.done()) EXPECT_EQ(name.rfind("fast", 0), 0u) << name;
  // Lane 1 has exactly its depth in flight; the other two wait for room on it.
  int slow_started = 0;
  for (const auto& name : q.started()) slow_started += name.rfind("slow", 0) == 0 ? 1 : 0;
  EXPECT_EQ(slow_started, 2);
  q.Open();
  WaitFor([&] { return q.done().size() == 8; });
  scheduler.Detach(&q);
}

}  // namespace
}  // namespace deltafin
