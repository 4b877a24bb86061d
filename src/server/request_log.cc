// The per-request log line (request_log.h).
#include "server/request_log.h"

#include <chrono>
#include <cstdio>

#include "base/log.h"

namespace deltafin::server {

namespace {

using Clock = std::chrono::steady_clock;

struct RequestRecord {
  const httplib::Request* req = nullptr;  // the request being served on this thread, if any
  Clock::time_point start;
  int status = 0;
  std::string detail;
};

thread_local RequestRecord current;

// The path as sent may hold anything percent-decoded (a newline would forge a log line).
std::string Printable(const std::string& s) {
  std::string out = s.substr(0, 200);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

}  // namespace

void BeginRequestLog(const httplib::Request& req) {
  current.req = &req;
  current.start = Clock::now();
  current.status = 0;
  current.detail.clear();
}

void AnnotateRequestLog(int status, const std::string& detail) {
  if (status != 0) current.status = status;
  current.detail = detail;
}

void LogRequest(const httplib::Request& req, const httplib::Response& res) {
  // The same thread serves the next request of this connection, possibly in a Request at the
  // same address: match the record only once, then clear it.
  const bool ours = current.req == &req;
  const int status = ours && current.status != 0 ? current.status : res.status;
  const LogLevel level = status >= 500 ? LogLevel::kError : LogLevel::kInfo;
  if (LogEnabled(level)) {
    std::string line = req.remote_addr + ":" + std::to_string(req.remote_port) + " " +
                       Printable(req.method) + " " + Printable(req.path) + " " +
                       std::to_string(status);
    if (ours) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), " %.3fs",
                    std::chrono::duration<double>(Clock::now() - current.start).count());
      line += secs;
      if (!current.detail.empty()) line += " " + current.detail;
    }
    Log(level, line);
  }
  current = RequestRecord{};
}

}  // namespace deltafin::server
