#include "setup/crash_point.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <string>

namespace deltafin::setup {

namespace {

struct Spec {
  bool armed = false;
  std::string name, substring;
  int nth = 1;
};

const Spec& TheSpec() {
  static const Spec spec = [] {
    Spec s;
    const char* env = std::getenv("DELTAFIN_CRASH_AT");
    if (env == nullptr || *env == '\0') return s;
    std::string v = env;
    if (const size_t hash = v.rfind('#'); hash != std::string::npos) {
      s.nth = std::max(1, std::atoi(v.c_str() + hash + 1));
      v.resize(hash);
    }
    if (const size_t colon = v.find(':'); colon != std::string::npos) {
      s.substring = v.substr(colon + 1);
      v.resize(colon);
    }
    s.name = v;
    s.armed = true;
    return s;
  }();
  return spec;
}

}  // namespace

void CrashPoint(const char* name, const std::string& subject) {
  const Spec& spec = TheSpec();
  if (!spec.armed || spec.name != name) return;
  if (!spec.substring.empty() && subject.find(spec.substring) == std::string::npos) return;
  static std::atomic<int> hits{0};
  if (++hits == spec.nth) ::kill(::getpid(), SIGKILL);
}

}  // namespace deltafin::setup
