// redis_server: see redis_server.h.
#include "launch/redis_server.h"

#include <arpa/inet.h>   // htonl, ntohs
#include <netinet/in.h>  // sockaddr_in, INADDR_LOOPBACK
#include <signal.h>      // kill
#include <sys/socket.h>  // socket, bind, getsockname
#include <sys/wait.h>    // WIFEXITED, WEXITSTATUS
#include <unistd.h>      // close


#include <cerrno>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/check.h"
#include "base/redis_ping.h"  // redis_ping
#include "launch/process.h"
#include "base/clock.h"  // SteadyClock

namespace ms::launch {

namespace fs = std::filesystem;
using Clock = SteadyClock;

int free_loopback_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  MS_SYSCHECK(s >= 0, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = ::bind(s, (sockaddr*)&a, sizeof a);
  if (rc != 0) { int e = errno; ::close(s); errno = e; }
  MS_SYSCHECK(rc == 0, "bind 127.0.0.1:0");
  socklen_t len = sizeof a;
  rc = ::getsockname(s, (sockaddr*)&a, &len);
  if (rc != 0) { int e = errno; ::close(s); errno = e; }
  MS_SYSCHECK(rc == 0, "getsockname");
  ::close(s);
  return ntohs(a.sin_port);
}

RedisServer::RedisServer(const fs::path& dir) : dir_(dir) {
  const std::string pidfile = (dir_ / "redis.pid").string(), logfile = (dir_ / "redis.log").string();
  const std::string exe = "/usr/bin/redis-server";
  MS_CHECK(fs::exists(exe), "redis-server is not installed (/usr/bin/redis-server): apt-get install redis-server");
  std::string last_error;
  try {
    for (int attempt = 0; attempt < 5; attempt++) {
      const int port = free_loopback_port();
      fs::remove(pidfile);
      const std::vector<std::string> argv = {exe, "--bind", "127.0.0.1", "--port", std::to_string(port),
                                             "--save", "", "--appendonly", "no", "--daemonize", "yes",
                                             "--pidfile", pidfile, "--logfile", logfile, "--dir", dir_.string()};
      const pid_t p = spawn(argv, current_environment(), -1, -1, -1, false);
      const int st = wait_for(p, "redis-server");
      MS_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "redis-server failed to start ({})",
               describe_status("redis-server", st));
      // The daemon writes its pidfile after it listens; then it must answer PING.
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (Clock::now() < deadline) {
        std::ifstream f(pidfile);
        long pid = 0;
        if (f >> pid && pid > 0) {
          pid_ = (pid_t)pid;
          if (redis_ping("127.0.0.1", port, "", std::chrono::milliseconds(1000)).ok()) {
            url_ = fmt::format("redis://127.0.0.1:{}", port);
            return;
          }
        }
        if (pid_ > 0 && !process_alive(pid_, "redis-server")) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      stop();
      std::ifstream log(logfile);
      std::stringstream ss;
      ss << log.rdbuf();
      last_error = ss.str();
      if (last_error.size() > 600) last_error = last_error.substr(last_error.size() - 600);
    }
  } catch (...) {
    stop();  // no destructor runs for a constructor that throws
    throw;
  }
  MS_FAIL("redis-server did not come up on 127.0.0.1 (5 attempts); its log ends:\n{}", last_error);
}

void RedisServer::stop() noexcept {
  const pid_t pid = pid_;
  pid_ = -1;
  if (pid <= 0 || !process_alive(pid, "redis-server")) return;
  ::kill(pid, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (Clock::now() < deadline && process_alive(pid, "redis-server"))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (process_alive(pid, "redis-server")) {
    ::kill(pid, SIGKILL);
    const auto hard = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < hard && process_alive(pid, "redis-server"))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace ms::launch
