// Finding out whether the client of a request is still connected.
//
// cpp-httplib 0.11 (Debian's) does not expose a request's socket, so the socket is found once per
// request by matching the peer and local addresses of the process's TCP sockets against the
// request's remote_addr/remote_port/local_port; it is then polled without blocking. A peer that
// closed (or half-closed) its side, reset the connection, or whose socket cannot be found any more
// counts as gone.
#pragma once

#include <httplib.h>

namespace deltafin::server {

class ClientConnection {
 public:
  explicit ClientConnection(const httplib::Request& request);
  // False once the client has closed the connection.
  bool Alive() const;

 private:
  int fd_ = -1;
};

}  // namespace deltafin::server
