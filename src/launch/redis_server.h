// redis_server: the life cycle of the redis-server a launch starts for its rendezvous store
// (launch-internal; `megascale launch --store redis`).
// RedisServer starts /usr/bin/redis-server daemonized on a free 127.0.0.1 port, without
// persistence, its pidfile, log and working files in a folder the caller owns, and returns once the
// server answers PING (hiredis, redis_answers). A port taken between choosing and binding, or a
// server that does not answer within 10 s, is retried on a fresh port, 5 attempts in all; then the
// constructor throws an ms::Error quoting the end of redis-server's log. The destructor (or stop())
// ends the server by the PID in its pidfile: SIGTERM, SIGKILL after 5 s, and waits until it is gone;
// a PID that no longer names a redis-server is left alone. It never throws.
#pragma once
#include <sys/types.h>  // pid_t

#include <chrono>
#include <filesystem>
#include <string>

namespace ms::launch {

class RedisServer {
 public:
  // Starts the server with its files in dir (an existing folder). Throws ms::Error (see above).
  explicit RedisServer(const std::filesystem::path& dir);
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // "redis://127.0.0.1:<port>"
  const std::string& url() const { return url_; }
  // Stops the server and waits until it is gone (idempotent).
  void stop() noexcept;

 private:
  std::filesystem::path dir_;
  std::string url_;
  pid_t pid_ = -1;
};

// True when a Redis server at host:port accepts a connection within `timeout` and answers PING
// with PONG (after AUTH when password is not empty). Otherwise false, and *why (when given) gets
// hiredis's or the server's reason ("Connection refused", "NOAUTH Authentication required.").
// Never throws; commands time out after `timeout` too.
bool redis_answers(const std::string& host, int port, const std::string& password, std::chrono::milliseconds timeout,
                   std::string* why = nullptr);

// A free TCP port on 127.0.0.1 (the kernel's choice; it may be taken again before use: retry).
int free_loopback_port();

}  // namespace ms::launch
