// dashboard_server.cpp: see dashboard_server.h.
#include "launch/dashboard_server.h"

#include <netdb.h>       // getnameinfo
#include <poll.h>        // poll
#include <sys/socket.h>  // recv, send, getpeername, shutdown
#include <unistd.h>      // close

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>

namespace ms::launch {

namespace {

using Clock = std::chrono::steady_clock;

// Set by the pre-routing handler on the worker thread that answers a refused request: the
// connection is closed after the answer (its body, if any, was never read).
thread_local bool t_close_after = false;

int ms_until(Clock::time_point t) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return (int)std::clamp<int64_t>(left, 0, 1 << 30);
}

bool wait_for(socket_t sock, short events, int timeout_ms) {
  pollfd p{sock, events, 0};
  int rc;
  do rc = ::poll(&p, 1, timeout_ms); while (rc < 0 && errno == EINTR);
  return rc > 0;
}

void address_of(socket_t sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int rc = peer ? ::getpeername(sock, (sockaddr*)&addr, &len) : ::getsockname(sock, (sockaddr*)&addr, &len);
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (rc != 0 || ::getnameinfo((sockaddr*)&addr, len, host, sizeof host, serv, sizeof serv,
                               NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return;
  ip = host;
  port = std::atoi(serv);
}

// A socket stream whose reads end at the current request's deadline (and after read_timeout
// without data); writes wait at most write_timeout. Reads are buffered (httplib reads the request
// line and headers a byte at a time).
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, std::chrono::milliseconds read_timeout, std::chrono::milliseconds write_timeout)
      : sock_(sock), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  void start_request(Clock::time_point deadline) {
    deadline_ = deadline;
    timed_out_ = false;
  }
  bool buffered() const { return begin_ < end_; }
  // A read of this request found no data in time (httplib then answers 400 and would go on).
  bool timed_out() const { return timed_out_; }

  bool is_readable() const override { return buffered() || wait_for(sock_, POLLIN, read_wait_ms()); }
  bool is_writable() const override { return wait_for(sock_, POLLOUT, (int)write_timeout_.count()); }

  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      if (!wait_for(sock_, POLLIN, read_wait_ms())) {  // the deadline or the read timeout passed
        timed_out_ = true;
        return -1;
      }
      ssize_t n;
      do n = ::recv(sock_, buf_, sizeof buf_, 0); while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = (size_t)n;
    }
    const size_t k = std::min(size, end_ - begin_);
    std::memcpy(ptr, buf_ + begin_, k);
    begin_ += k;
    return (ssize_t)k;
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL); while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(sock_, false, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  int read_wait_ms() const { return std::min(ms_until(deadline_), (int)read_timeout_.count()); }

  socket_t sock_;
  std::chrono::milliseconds read_timeout_, write_timeout_;
  Clock::time_point deadline_{};
  bool timed_out_ = false;
  char buf_[4096];
  size_t begin_ = 0, end_ = 0;
};

}  // namespace

DashboardServer::DashboardServer(const DashboardServerLimits& limits) : limits_(limits) {
  new_task_queue = [n = limits.threads] { return new httplib::ThreadPool((size_t)n); };
  set_payload_max_length(limits.max_body);
  set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    auto refuse = [&](int status, const std::string& why) {
      res.status = status;
      res.set_content(why + "\n", "text/plain; charset=utf-8");
      t_close_after = true;
      return HandlerResponse::Handled;
    };
    if (req.method != "GET" && req.method != "HEAD") {
      res.set_header("Allow", "GET, HEAD");
      return refuse(405, "the dashboard serves GET and HEAD only");
    }
    if (req.has_header("Content-Length")) {
      const std::string v = req.get_header_value("Content-Length");
      size_t n = 0;
      const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
      if (r.ec != std::errc() || r.ptr != v.data() + v.size() || n > limits_.max_body)
        return refuse(413, "request body too large for the dashboard");
    }
    return HandlerResponse::Unhandled;
  });
}

bool DashboardServer::process_and_close_socket(socket_t sock) {
  const auto read_timeout = std::chrono::seconds(read_timeout_sec_) + std::chrono::microseconds(read_timeout_usec_);
  const auto write_timeout = std::chrono::seconds(write_timeout_sec_) + std::chrono::microseconds(write_timeout_usec_);
  DeadlineStream strm(sock, std::chrono::duration_cast<std::chrono::milliseconds>(read_timeout),
                      std::chrono::duration_cast<std::chrono::milliseconds>(write_timeout));
  bool ok = true;
  for (size_t served = 0; served < limits_.max_requests; served++) {
    // The next request must start within the keep-alive time (the first one too); the server's
    // stop (svr_sock_ closed) ends the wait.
    const auto idle_until = Clock::now() + limits_.keep_alive;
    bool ready = strm.buffered();
    while (!ready && svr_sock_ != INVALID_SOCKET && Clock::now() < idle_until)
      ready = wait_for(sock, POLLIN, std::min(ms_until(idle_until), 100));
    if (!ready || svr_sock_ == INVALID_SOCKET) break;
    strm.start_request(Clock::now() + limits_.request_timeout);
    t_close_after = false;
    bool closed = false;
    ok = process_request(strm, served + 1 == limits_.max_requests, closed, nullptr);
    if (!ok || closed || t_close_after || strm.timed_out()) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace ms::launch
