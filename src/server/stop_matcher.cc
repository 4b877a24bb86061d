// StopMatcher: earliest complete match wins; otherwise hold the longest suffix that is a proper
// prefix of some stop sequence.
#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace deltafin::server {

std::string StopMatcher::Feed(std::string_view text, bool* stopped) {
  *stopped = stopped_;
  if (stopped_) return "";
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  size_t first = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first) first = at, matched_ = s;
  }
  if (first != std::string::npos) {
    stopped_ = *stopped = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::Flush() { return stopped_ ? "" : std::exchange(held_, {}); }

}  // namespace deltafin::server
