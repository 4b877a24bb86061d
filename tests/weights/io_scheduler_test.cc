// IoScheduler (weights/io_scheduler.h): reads are taken by priority across queues — expert
// demand, then spine, then guesses — and Detach returns only once no thread runs the queue.
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

}  // namespace
}  // namespace deltafin
