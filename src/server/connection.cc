// ClientConnection: socket lookup by address and a non-blocking liveness poll.
#include "server/connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace deltafin::server {

namespace {

bool AddressOf(const sockaddr_storage& sa, std::string* ip, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    *port = ntohs(in->sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *ip = buf;
  return true;
}

}  // namespace

ClientConnection::ClientConnection(const httplib::Request& request) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof(peer), ll = sizeof(local);
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    std::string pip, lip;
    int pport = -1, lport = -1;
    if (!AddressOf(peer, &pip, &pport) || !AddressOf(local, &lip, &lport)) continue;
    if (pip == request.remote_addr && pport == request.remote_port && lport == request.local_port) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
}

bool ClientConnection::Alive() const {
  if (fd_ < 0) return true;  // not found: cannot tell, assume alive (writes still detect it)
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) < 0) return errno == EINTR;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return false;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  return true;
}

}  // namespace deltafin::server
