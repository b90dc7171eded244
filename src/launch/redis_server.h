// redis_server: the life cycle of the redis-server a launch starts for its rendezvous store
// (launch-internal; `megascale launch --store redis`).
// RedisServer runs /usr/bin/redis-server as OUR CHILD in the foreground (no daemonizing: the pid we
// hold is the server), in a process group of its own (a Ctrl-C to the terminal does not reach it),
// bound to die with this process (PR_SET_PDEATHSIG, see process.h: construct it on a long-lived
// thread), on a free 127.0.0.1 port, without persistence, requiring a random per-server password
// (128 bits from getrandom, 32 hex chars). The password reaches redis only through a config file of
// mode 0600 in the caller's folder (redis-server's first argument), never a command line; the
// caller passes it on through the environment (MEGASCALE_STORE_PASSWORD) and must never log it.
// The folder also holds redis.log (the server's stdout and stderr). The constructor returns once the
// server answers AUTH + PING (base/redis_ping.h). A port taken between choosing and binding, or a
// server that does not answer within 10 s, is retried on a fresh port, 5 attempts in all; then it
// throws an ms::Error quoting the end of redis.log. The destructor (or stop()) ends the server:
// SIGTERM to its group, SIGKILL after 5 s, and reaps it. It never throws.
// exited() and answers() let the owner watch the server (a killed server is reaped, not left a
// zombie); JobStore::heal (job_store.h) starts a new one.
#pragma once
#include <sys/types.h>  // pid_t

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

namespace ms::launch {

class Janitor;

class RedisServer {
 public:
  // Starts the server with its files in dir (an existing folder, best private: mode 0700). With a
  // janitor, the server's process group is watched while it runs (forgotten once it is reaped).
  // Throws ms::Error (see above).
  explicit RedisServer(const std::filesystem::path& dir, Janitor* janitor = nullptr);
  ~RedisServer() { stop(); }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // "redis://127.0.0.1:<port>"
  const std::string& url() const { return url_; }
  // The AUTH password (hex). Secret: into a child's environment only, never a log or a command line.
  const std::string& password() const { return password_; }
  // The server's pid (its process group too); -1 once stopped.
  pid_t pid() const { return pid_; }
  // Stops the server and reaps it (idempotent).
  void stop() noexcept;
  // When the server has ended (reaped now, its group killed): its exit in words; else nullopt.
  std::optional<std::string> exited();
  // It answers AUTH + PING within `timeout`; else the reason in words.
  std::optional<std::string> ping_error(std::chrono::milliseconds timeout) const;

 private:
  std::filesystem::path dir_;
  Janitor* janitor_ = nullptr;
  std::string url_;
  std::string password_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// A free TCP port on 127.0.0.1 (the kernel's choice; it may be taken again before use: retry).
int free_loopback_port();

// n random bytes from the kernel (getrandom, /dev/urandom as a fallback) as 2n lowercase hex chars.
// Throws ms::Error when neither works.
std::string random_hex(size_t n_bytes);

}  // namespace ms::launch
