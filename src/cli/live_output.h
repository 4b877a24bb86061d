// What `deltafin run` shows while it works. On stdout, the generated text as each token is
// decoded (flushed per token, so a pipe or terminal sees it at once), with K3's thinking dimmed on
// a terminal, prefixed "thinking: " on each line elsewhere, or hidden. On stderr, a progress line
// during prefill: positions done, tokens/s, and the time left at that rate.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace deltafin::cli {

enum class ThinkingStyle {
  kDim,     // ANSI faint while thinking (only used when stdout is a terminal)
  kPrefix,  // each thinking line starts with "thinking: " (files and pipes)
  kHide,    // thinking is not printed
};

class TextPrinter {
 public:
  static constexpr std::string_view kThinkingPrefix = "thinking: ";

  TextPrinter(std::FILE* out, ThinkingStyle thinking) : out_(out), thinking_(thinking) {}
  void Reasoning(std::string_view text);
  void Content(std::string_view text);
  // Resets the terminal style and ends the last line with a newline if the text did not (so a
  // shell prompt or an error message starts on a line of its own).
  void Finish();
  bool wrote_anything() const { return wrote_; }

 private:
  enum class Channel { kNone, kReasoning, kContent };
  void Enter(Channel channel);
  void Write(std::string_view text);
  void Style(std::string_view escape);

  std::FILE* out_;
  ThinkingStyle thinking_;
  Channel channel_ = Channel::kNone;
  bool at_line_start_ = true;
  bool wrote_ = false;
};

// "prefill 64/512 positions, wave 2/8, 3.2 tok/s, ETA 2m20s" (a wave: the positions one prefill
// pass processes, ModelInfo::prefill_wave). On a terminal the line is redrawn in place and erased
// when prefill ends; elsewhere (--progress into a file) each update is its own line.
class PrefillProgressLine {
 public:
  PrefillProgressLine(std::FILE* err, bool redraw) : err_(err), redraw_(redraw) {}
  // `wave`: positions per wave (the last one maybe shorter).
  void Start(int64_t total, int64_t wave);
  void Update(int64_t done, int64_t total);
  void Finish();

 private:
  void Print(const std::string& line);

  std::FILE* err_;
  bool redraw_;
  bool drawn_ = false;
  int64_t wave_ = 1;
  std::chrono::steady_clock::time_point start_;
};

// "2m20s", "1h05m", "7.5s".
std::string FormatDuration(double seconds);

}  // namespace deltafin::cli
