// Stop sequences over streamed text. Text that could be the beginning of a stop sequence is held
// back until it either completes one (generation ends; the stop text is never returned) or can no
// longer match (it is released). Stop strings and fed text are valid UTF-8, so every cut falls on
// a character boundary.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace deltafin::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends `text` and returns what is safe to emit now. When a stop sequence completes, sets
  // *stopped, returns the text before it and ignores everything fed afterwards.
  std::string Feed(std::string_view text, bool* stopped);
  // End of generation without a stop: returns the held-back text.
  std::string Flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the sequence that stopped, or ""

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace deltafin::server
