// GatedServer: cpp-httplib's Server with a gate in front of its worker threads, so that slow or
// hostile clients cannot starve the pool (docs/SERVER.md, "Connections").
//
// cpp-httplib 0.11 gives each connection a pool thread from accept to close, and its read timeout
// is per read: a client that sends its headers one byte per second keeps a thread as long as it
// likes, and a few dozen of them leave every other request waiting in the pool's unbounded task
// list. Here an accepted socket goes to one epoll thread (the gate) instead, which holds it,
// without a thread, until a complete request head (up to the blank line) has arrived; only then
// does a pool thread parse and answer that one request, and a keep-alive connection goes back to
// the gate afterwards. Rules the gate enforces:
//   - a head must be complete within header_timeout of the accept (of the previous response:
//     header_timeout rounded up to whole seconds, as the Keep-Alive header says): otherwise 408
//     (a keep-alive connection that sent nothing is just closed);
//   - a head larger than 64 KiB gets 431;
//   - past max_connections open connections a new one gets 503 at once;
//   - a body over the payload limit (set_payload_max_length) gets 413 before any of it is read:
//     a Content-Length over the limit as soon as the head is parsed, a chunked body once its
//     bytes on the wire pass the limit. The connection is then drained (bytes read and dropped)
//     for up to 2 s and closed, so that the client reads the 413 rather than a reset.
// The listen socket is bound without SO_REUSEPORT (cpp-httplib sets it by default, which lets a
// second server share a busy port silently) and its backlog is raised from cpp-httplib's 5.
#pragma once

#include <httplib.h>

#include <atomic>
#include <functional>
#include <string>

namespace deltafin::server {

struct GateOptions {
  double header_timeout_s = 15;
  int max_connections = 1024;  // open connections, waiting or being served
  int threads = 32;            // pool threads that parse and answer requests
  // The body of an error response the gate sends itself (408, 413, 431, 503), as JSON.
  std::function<std::string(int status, const std::string& message, const std::string& code)>
      error_body;
};

class GatedServer : public httplib::Server {
 public:
  explicit GatedServer(GateOptions options);
  ~GatedServer() override;

 private:
  class Gate;
  class GateStream;
  enum class Outcome { kKeepAlive, kDrain, kClose };

  // cpp-httplib calls this for each accepted socket (on the listen thread, through Gate::enqueue):
  // the socket is handed to the gate.
  bool process_and_close_socket(socket_t sock) override;
  // One request whose head is already in the socket's receive buffer (on a pool thread).
  Outcome ServeOne(int fd, size_t head_bytes, bool last);
  std::string ErrorResponse(int status, const char* reason, const std::string& message,
                            const std::string& code) const;

  GateOptions opt_;
  std::atomic<Gate*> gate_{nullptr};
  std::atomic<int> open_{0};
};

}  // namespace deltafin::server
