// OpTimer: the op-family time breakdown of a forward pass (SessionStats::op_seconds,
// docs/BREAKDOWN.md).
//
// One steady-clock read per section boundary: Charge(f) adds the time since the previous boundary
// to family f, so consecutive sections tile the forward pass and the families sum to its wall
// time by construction. A section is charged at its end, which is why every caller charges the
// work it did before calling into code that charges its own sections. No allocation, no branch on
// anything but a null timer; kernels see nothing of it, so results do not change.
#pragma once

#include <chrono>

#include "deltafin/engine.h"

namespace deltafin {

class OpTimer {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts a forward pass: the next Charge covers the time from now.
  void Start(SessionStats* stats) {
    seconds_ = stats->op_seconds.data();
    last_ = Clock::now();
  }
  // Returns the seconds charged.
  double Charge(OpFamily family) {
    const Clock::time_point now = Clock::now();
    const double seconds = std::chrono::duration<double>(now - last_).count();
    seconds_[static_cast<size_t>(family)] += seconds;
    last_ = now;
    return seconds;
  }

 private:
  double* seconds_ = nullptr;
  Clock::time_point last_;
};

// For the op functions whose timer is optional (tests call them without one).
inline void Charge(OpTimer* timer, OpFamily family) {
  if (timer != nullptr) timer->Charge(family);
}

}  // namespace deltafin
