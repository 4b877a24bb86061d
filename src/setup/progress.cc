#include "setup/progress.h"

#include <unistd.h>

#include <cstdio>

namespace deltafin::setup {

Progress::Progress(std::string label, uint64_t total_bytes)
    : label_(std::move(label)),
      total_(total_bytes),
      tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void Progress::Add(uint64_t bytes) {
  done_ += bytes;
  const auto now = std::chrono::steady_clock::now();
  const auto interval = tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(10000);
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock() || now - last_draw_ < interval) return;
  last_draw_ = now;
  Draw(false);
}

void Progress::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  Draw(true);
}

void Progress::Draw(bool final_line) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const uint64_t done = done_.load();
  const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  const double pct =
      total_ > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0;
  char eta[32] = "--:--";
  if (rate > 0 && total_ > done) {
    const auto left = static_cast<uint64_t>(static_cast<double>(total_ - done) / rate);
    std::snprintf(eta, sizeof(eta), "%llu:%02llu:%02llu",
                  static_cast<unsigned long long>(left / 3600),
                  static_cast<unsigned long long>(left / 60 % 60),
                  static_cast<unsigned long long>(left % 60));
  }
  const std::string line = label_ + ": " + HumanBytes(done) + " / " + HumanBytes(total_) + " (" +
                           std::to_string(static_cast<int>(pct)) + "%), " +
                           HumanBytes(static_cast<uint64_t>(rate)) + "/s, " +
                           (final_line ? "done in " + std::to_string(static_cast<int>(secs)) + " s"
                                       : std::string("ETA ") + eta);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace deltafin::setup
