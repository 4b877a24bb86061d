// GatedServer: the epoll gate that holds connections until their request head is complete, the
// stream a pool thread uses to answer one request, and the listen-socket options.
#include "server/gated_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace deltafin::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxHeadBytes = 64 << 10;
constexpr auto kDrainTime = std::chrono::seconds(2);
constexpr int kListenBacklog = 1024;

int PollMs(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

void Discard(int fd) {
  char buf[16 << 10];
  while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
  }
}

// Best effort: the socket's send buffer is empty, so a short response goes out whole.
void SendNow(int fd, const std::string& bytes) {
  (void)send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

void CloseSocket(int fd) {
  shutdown(fd, SHUT_RDWR);
  close(fd);
}

void AddressOf(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  auto* p = reinterpret_cast<sockaddr*>(&sa);
  if ((peer ? getpeername(fd, p, &len) : getsockname(fd, p, &len)) != 0) return;
  char host[NI_MAXHOST] = {}, serv[NI_MAXSERV] = {};
  if (getnameinfo(p, len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

}  // namespace

// The stream of one request: the head (known to be complete in the receive buffer) is read in
// one go; the body is read on demand with the per-read timeout and counted against the limit.
// Reads never go past what the request asks for, so a pipelined next request stays in the
// socket for the gate.
class GatedServer::GateStream final : public httplib::Stream {
 public:
  GateStream(int fd, int read_ms, int write_ms) : fd_(fd), read_ms_(read_ms), write_ms_(write_ms) {}

  bool ReadHead(size_t bytes) {
    head_.resize(bytes);
    size_t got = 0;
    while (got < bytes) {
      const ssize_t n = recv(fd_, head_.data() + got, bytes - got, 0);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }
  // After the head: at most `limit` more bytes may be read, then the body is refused (413).
  void LimitBody(size_t limit, std::string refusal) {
    body_limit_ = limit;
    refusal_ = std::move(refusal);
  }
  // Sends `response` and ends the stream: later reads and writes fail.
  void Refuse(const std::string& response) {
    if (refused_) return;
    refused_ = true;
    WriteAll(response);
  }
  bool refused() const { return refused_; }

  bool is_readable() const override {
    return !refused_ && (head_pos_ < head_.size() || Wait(POLLIN, read_ms_));
  }
  bool is_writable() const override { return !refused_ && Wait(POLLOUT, write_ms_) && PeerOpen(); }
  ssize_t read(char* ptr, size_t size) override {
    if (refused_) return -1;
    if (head_pos_ < head_.size()) {
      const size_t n = std::min(size, head_.size() - head_pos_);
      std::copy_n(head_.data() + head_pos_, n, ptr);
      head_pos_ += n;
      return static_cast<ssize_t>(n);
    }
    if (body_read_ >= body_limit_) {
      Refuse(refusal_);
      return -1;
    }
    size = std::min(size, body_limit_ - body_read_ + 1);  // one byte past the limit tells
    if (!Wait(POLLIN, read_ms_)) return -1;
    const ssize_t n = recv(fd_, ptr, size, 0);
    if (n > 0) body_read_ += static_cast<size_t>(n);
    if (body_read_ > body_limit_) {
      Refuse(refusal_);
      return -1;
    }
    return n;
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (refused_ || !Wait(POLLOUT, write_ms_)) return -1;
    return send(fd_, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    AddressOf(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    AddressOf(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  bool Wait(short events, int ms) const {
    pollfd p{fd_, events, 0};
    int r;
    do {
      r = poll(&p, 1, ms);
    } while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & events);
  }
  // False once the client has closed its side (as cpp-httplib's own socket stream checks).
  bool PeerOpen() const {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return true;
    char c;
    return recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  void WriteAll(const std::string& s) {
    size_t off = 0;
    while (off < s.size() && Wait(POLLOUT, write_ms_)) {
      const ssize_t n = send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

  const int fd_;
  const int read_ms_, write_ms_;
  std::string head_;
  size_t head_pos_ = 0;
  size_t body_limit_ = SIZE_MAX - 1;
  size_t body_read_ = 0;
  std::string refusal_;
  bool refused_ = false;
};

// The gate is also cpp-httplib's task queue: listen_internal creates it with new_task_queue,
// hands it each accepted socket as a task (run at once: it only registers the socket) and shuts
// it down when listening ends, which stops the epoll thread before the pool.
class GatedServer::Gate final : public httplib::TaskQueue {
 public:
  Gate(GatedServer& server, int threads) : server_(server), pool_(static_cast<size_t>(threads)) {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
    thread_ = std::thread([this] { Loop(); });
  }
  ~Gate() override {
    shutdown();
    close(epoll_);
    close(wake_);
  }

  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    Wake();
    thread_.join();
    pool_.shutdown();  // requests being answered finish; their connections then close
  }

  // A connection waiting for a request head: a new one, or a kept-alive one after a response.
  void Hold(int fd, size_t served, bool draining) {
    // A kept-alive connection gets the whole seconds its Keep-Alive header announced (the header
    // timeout rounded up), so that a client never finds it closed earlier than it was told.
    const auto wait = draining ? Clock::duration(kDrainTime)
                      : served > 0
                          ? Clock::duration(std::chrono::seconds(server_.keep_alive_timeout_sec_))
                          : std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(server_.opt_.header_timeout_s));
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        incoming_.push_back(Conn{fd, Clock::now() + wait, served, draining});
        fd = -1;
      }
    }
    if (fd >= 0) return Close(fd);
    Wake();
  }
  void Close(int fd) {
    CloseSocket(fd);
    server_.open_.fetch_sub(1);
  }

 private:
  struct Conn {
    int fd;
    Clock::time_point deadline;
    size_t served;  // requests answered on this connection so far
    bool draining;  // a refused body: read and drop until the deadline, then close
  };

  void Wake() {
    const uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof(one));
  }

  void Loop() {
    std::vector<epoll_event> events(256);
    std::vector<char> peek(kMaxHeadBytes);
    for (;;) {
      std::vector<Conn> fresh;
      {
        std::lock_guard lock(mu_);
        if (stopping_) break;
        fresh.swap(incoming_);
      }
      for (const Conn& c : fresh) {
        epoll_event ev{};
        // Edge-triggered: the gate only peeks at a head, so the data stays readable; it wants
        // to hear about new bytes, not about the ones it has already seen.
        ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
        ev.data.fd = c.fd;
        if (epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &ev) != 0) {
          Close(c.fd);
          continue;
        }
        held_[c.fd] = c;
      }
      // Sleep until the nearest deadline (or forever when nothing is held).
      int64_t timeout_ms = -1;
      const auto now = Clock::now();
      for (const auto& [fd, c] : held_) {
        const int64_t ms = std::max<int64_t>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now).count() + 1);
        timeout_ms = timeout_ms < 0 ? ms : std::min(timeout_ms, ms);
      }
      const int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()),
                               static_cast<int>(timeout_ms));
      for (int i = 0; i < n; ++i) {
        const int fd = events[static_cast<size_t>(i)].data.fd;
        if (fd == wake_) {
          uint64_t count;
          (void)!::read(wake_, &count, sizeof(count));
          continue;
        }
        auto it = held_.find(fd);
        if (it != held_.end()) Examine(it, peek);
      }
      const auto later = Clock::now();
      for (auto it = held_.begin(); it != held_.end();) {
        it = it->second.deadline <= later ? Expire(it) : std::next(it);
      }
    }
    for (auto& [fd, c] : held_) Close(fd);
    held_.clear();
    std::lock_guard lock(mu_);
    for (const Conn& c : incoming_) Close(c.fd);
    incoming_.clear();
  }

  using Held = std::unordered_map<int, Conn>;

  // Stops watching a held connection (which a pool thread then answers, or which is closed).
  Held::iterator Release(Held::iterator it) {
    epoll_ctl(epoll_, EPOLL_CTL_DEL, it->first, nullptr);
    return held_.erase(it);
  }
  Held::iterator Drop(Held::iterator it) {
    const int fd = it->first;
    auto next = Release(it);
    Close(fd);
    return next;
  }

  void Examine(Held::iterator it, std::vector<char>& peek) {
    Conn& c = it->second;
    if (c.draining) {
      char buf[16 << 10];
      ssize_t r;
      while ((r = recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
      }
      if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) Drop(it);
      return;
    }
    const ssize_t r = recv(c.fd, peek.data(), peek.size(), MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (r <= 0) {  // closed before a (complete) request, or an error
      Drop(it);
      return;
    }
    const std::string_view data(peek.data(), static_cast<size_t>(r));
    const size_t end = data.find("\r\n\r\n");
    if (end != std::string_view::npos) {
      const Conn ready = c;
      Release(it);
      const size_t head = end + 4;
      pool_.enqueue([this, ready, head] { Answer(ready, head); });
      return;
    }
    if (data.size() >= kMaxHeadBytes) {
      const int fd = c.fd;
      Release(it);
      Refuse(fd, 431, "Request Header Fields Too Large",
             "the request head exceeds " + std::to_string(kMaxHeadBytes) + " bytes",
             "request_header_too_large");
    }
  }

  // On a pool thread: one request, then back to the gate (keep-alive, drain) or closed.
  void Answer(Conn c, size_t head) {
    const bool last =
        c.served + 1 >= server_.keep_alive_max_count_ || server_.svr_sock_ == INVALID_SOCKET;
    switch (server_.ServeOne(c.fd, head, last)) {
      case Outcome::kKeepAlive:
        return Hold(c.fd, c.served + 1, false);
      case Outcome::kDrain:
        ::shutdown(c.fd, SHUT_WR);  // the response is complete: FIN, then read what still comes
        return Hold(c.fd, c.served + 1, true);
      case Outcome::kClose:
        return Close(c.fd);
    }
  }

  // A deadline passed: a partial head gets 408; an idle keep-alive connection or a drained one
  // is just closed.
  Held::iterator Expire(Held::iterator it) {
    const Conn c = it->second;
    char byte;
    const bool partial = !c.draining && recv(c.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
    if (!partial) return Drop(it);
    auto next = Release(it);
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%g", server_.opt_.header_timeout_s);
    Refuse(c.fd, 408, "Request Timeout",
           std::string("the request head did not arrive within ") + secs + " s", "request_timeout");
    return next;
  }

  // Answers with an error and closes. The bytes already received are consumed first, so that the
  // close sends a FIN after the response rather than a reset that could discard it.
  void Refuse(int fd, int status, const char* reason, const std::string& message,
              const std::string& code) {
    Discard(fd);
    SendNow(fd, server_.ErrorResponse(status, reason, message, code));
    Close(fd);
  }

  GatedServer& server_;
  httplib::ThreadPool pool_;
  int epoll_ = -1, wake_ = -1;
  std::mutex mu_;
  std::vector<Conn> incoming_;  // guarded by mu_
  bool stopping_ = false;       // guarded by mu_
  Held held_;                   // the gate thread's own
  std::thread thread_;
};

GatedServer::GatedServer(GateOptions options) : opt_(std::move(options)) {
  // SO_REUSEADDR only (a restart may bind while old connections linger in TIME_WAIT); without
  // SO_REUSEPORT a second server on a port in use fails to bind.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // The Keep-Alive header cpp-httplib sends announces this; Gate::Hold keeps to it.
  set_keep_alive_timeout(static_cast<time_t>(std::ceil(opt_.header_timeout_s)));
  new_task_queue = [this] {
    // Called by listen_internal once the socket is bound, before the first accept.
    ::listen(svr_sock_, kListenBacklog);
    auto* gate = new Gate(*this, std::max(1, opt_.threads));
    gate_.store(gate);
    return gate;
  };
}

GatedServer::~GatedServer() = default;

bool GatedServer::process_and_close_socket(socket_t sock) {
  Gate* gate = gate_.load();
  if (gate == nullptr) {
    CloseSocket(sock);
    return false;
  }
  if (open_.fetch_add(1) >= opt_.max_connections) {
    Discard(sock);
    SendNow(sock, ErrorResponse(503, "Service Unavailable",
                                "too many open connections (" +
                                    std::to_string(opt_.max_connections) + "); retry later",
                                "too_many_connections"));
    gate->Close(sock);
    return false;
  }
  gate->Hold(sock, 0, false);
  return true;
}

GatedServer::Outcome GatedServer::ServeOne(int fd, size_t head_bytes, bool last) {
  GateStream strm(fd, PollMs(read_timeout_sec_, read_timeout_usec_),
                  PollMs(write_timeout_sec_, write_timeout_usec_));
  if (!strm.ReadHead(head_bytes)) return Outcome::kClose;
  const std::string too_large = ErrorResponse(
      413, "Payload Too Large",
      "the request body exceeds the limit of " + std::to_string(payload_max_length_) + " bytes",
      "request_too_large");
  bool connection_closed = false;
  const bool ok = process_request(strm, last, connection_closed, [&](httplib::Request& req) {
    const std::string length = req.get_header_value("Content-Length");
    char* end = nullptr;
    const unsigned long long declared = std::strtoull(length.c_str(), &end, 10);
    if (!length.empty() && *end == '\0' && declared > payload_max_length_) {
      strm.Refuse(too_large);
    } else {
      strm.LimitBody(payload_max_length_, too_large);
    }
  });
  if (strm.refused()) return Outcome::kDrain;
  return ok && !connection_closed && !last ? Outcome::kKeepAlive : Outcome::kClose;
}

std::string GatedServer::ErrorResponse(int status, const char* reason, const std::string& message,
                                       const std::string& code) const {
  const std::string body = opt_.error_body ? opt_.error_body(status, message, code) : message;
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         (status == 503 ? "\r\nRetry-After: 1" : "") + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace deltafin::server
