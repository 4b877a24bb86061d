// Progress of a long download: a redrawn bar on a terminal (bytes, rate, ETA), plain log lines
// every few seconds otherwise (CI logs, pipes). Thread-safe; Add() is cheap.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "base/byte_size.h"

namespace deltafin::setup {

class Progress {
 public:
  Progress(std::string label, uint64_t total_bytes);
  void Add(uint64_t bytes);
  // Prints the final line (and ends the bar's line on a terminal).
  void Finish();
  uint64_t done() const { return done_.load(); }

 private:
  void Draw(bool final_line);
  std::string label_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::mutex mu_;
};

}  // namespace deltafin::setup
