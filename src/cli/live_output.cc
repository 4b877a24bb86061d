// TextPrinter and PrefillProgressLine (see live_output.h).
#include "cli/live_output.h"

#include <algorithm>
#include <cmath>

namespace deltafin::cli {

namespace {

constexpr std::string_view kFaint = "\x1b[2m", kNormal = "\x1b[22m";

}  // namespace

void TextPrinter::Write(std::string_view text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), out_);
  at_line_start_ = text.back() == '\n';
  wrote_ = true;
}

// Terminal escapes are not text: they leave at_line_start_ alone.
void TextPrinter::Style(std::string_view escape) {
  std::fwrite(escape.data(), 1, escape.size(), out_);
}

void TextPrinter::Enter(Channel channel) {
  if (channel == channel_) return;
  if (channel_ == Channel::kReasoning && thinking_ == ThinkingStyle::kDim) Style(kNormal);
  // Thinking and the answer never share a line.
  if (channel_ != Channel::kNone && !at_line_start_) Write("\n");
  if (channel == Channel::kReasoning && thinking_ == ThinkingStyle::kDim) Style(kFaint);
  channel_ = channel;
}

void TextPrinter::Reasoning(std::string_view text) {
  if (text.empty() || thinking_ == ThinkingStyle::kHide) return;
  Enter(Channel::kReasoning);
  if (thinking_ == ThinkingStyle::kPrefix) {
    while (!text.empty()) {
      if (at_line_start_) Write(kThinkingPrefix);
      const size_t newline = text.find('\n');
      const size_t n = newline == std::string_view::npos ? text.size() : newline + 1;
      Write(text.substr(0, n));
      text.remove_prefix(n);
    }
  } else {
    Write(text);
  }
  std::fflush(out_);
}

void TextPrinter::Content(std::string_view text) {
  if (text.empty()) return;
  Enter(Channel::kContent);
  Write(text);
  std::fflush(out_);
}

void TextPrinter::Finish() {
  if (channel_ == Channel::kReasoning && thinking_ == ThinkingStyle::kDim) Style(kNormal);
  channel_ = Channel::kNone;
  if (wrote_ && !at_line_start_) Write("\n");
  std::fflush(out_);
}

std::string FormatDuration(double seconds) {
  char text[32];
  if (seconds < 60) {
    std::snprintf(text, sizeof text, "%.1fs", seconds);
  } else if (seconds < 3600) {
    const long long s = std::llround(seconds);
    std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  } else {
    const long long m = std::llround(seconds / 60);
    std::snprintf(text, sizeof text, "%lldh%02lldm", m / 60, m % 60);
  }
  return text;
}

void PrefillProgressLine::Print(const std::string& line) {
  if (redraw_) {
    std::fprintf(err_, "\r%s\x1b[K", line.c_str());  // \x1b[K: erase the rest of the old line
  } else {
    std::fprintf(err_, "%s\n", line.c_str());
  }
  std::fflush(err_);
  drawn_ = true;
}

void PrefillProgressLine::Start(int64_t total, int64_t wave) {
  start_ = std::chrono::steady_clock::now();
  wave_ = std::max<int64_t>(wave, 1);
  Print("prefill 0/" + std::to_string(total) + " positions, wave 0/" +
        std::to_string((total + wave_ - 1) / wave_));
}

void PrefillProgressLine::Update(int64_t done, int64_t total) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  char line[200];
  std::snprintf(line, sizeof line, "prefill %lld/%lld positions, wave %lld/%lld, %.2f tok/s",
                static_cast<long long>(done), static_cast<long long>(total),
                static_cast<long long>((done + wave_ - 1) / wave_),
                static_cast<long long>((total + wave_ - 1) / wave_), rate);
  std::string text = line;
  if (done < total && rate > 0) {
    text += ", ETA " + FormatDuration(static_cast<double>(total - done) / rate);
  }
  Print(text);
}

void PrefillProgressLine::Finish() {
  if (redraw_ && drawn_) {
    std::fprintf(err_, "\r\x1b[K");
    std::fflush(err_);
  }
  drawn_ = false;
}

}  // namespace deltafin::cli
