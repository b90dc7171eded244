// redis_server: the life cycle of the redis-server a launch starts for its rendezvous store
// (launch-internal; `megascale launch --store redis`).
// RedisServer starts /usr/bin/redis-server daemonized on a free 127.0.0.1 port, without
// persistence, its pidfile, log and working files in a folder the caller owns, and returns once the
// server answers PING (base/redis_ping.h). A port taken between choosing and binding, or a
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

// A free TCP port on 127.0.0.1 (the kernel's choice; it may be taken again before use: retry).
int free_loopback_port();

}  // namespace ms::launch
