// dashboard_server: the dashboard's HTTP server (launch-internal): cpp-httplib's Server with the
// limits a job's parent process needs, since anyone who reaches the port can talk to it.
// Guarantees:
//  - Only GET and HEAD are served: any other method gets 405 (with "Allow: GET, HEAD") before its
//    body is read, and the connection is closed after the answer.
//  - A request body over `max_body` bytes is refused with 413 and never held in memory.
//  - A request's line, headers and body must all arrive within `request_timeout` of the request's
//    start (a client sending a byte now and then no longer holds a worker: its connection is
//    closed at the deadline); an idle keep-alive connection is closed after `keep_alive`, and one
//    connection serves at most `max_requests` requests.
//  - `threads` workers serve the connections.
// cpp-httplib (Debian's 0.11) has no per-request deadline of its own: the server overrides its
// per-connection loop (process_and_close_socket) and reads through a stream that enforces it.
#pragma once
#include <httplib.h>

#include <chrono>
#include <cstddef>

namespace ms::launch {

struct DashboardServerLimits {
  std::chrono::milliseconds request_timeout{5000};  // a whole request (line, headers, body) must arrive within
  std::chrono::milliseconds keep_alive{1000};       // an idle keep-alive connection is closed after this
  size_t max_body = 64 * 1024;                      // bytes of a request body (413 above)
  size_t max_requests = 100;                        // per connection
  int threads = 8;                                  // workers
};

class DashboardServer : public httplib::Server {
 public:
  explicit DashboardServer(const DashboardServerLimits& limits);

 private:
  bool process_and_close_socket(socket_t sock) override;

  DashboardServerLimits limits_;
};

}  // namespace ms::launch
