// redis_server: see redis_server.h.
#include "launch/redis_server.h"

#include <arpa/inet.h>   // htonl, ntohs
#include <netinet/in.h>  // sockaddr_in, INADDR_LOOPBACK
#include <signal.h>      // kill
#include <sys/socket.h>  // socket, bind, getsockname
#include <fcntl.h>       // open, O_CLOEXEC
#include <sys/random.h>  // getrandom
#include <sys/stat.h>    // fchmod
#include <sys/wait.h>    // waitpid
#include <unistd.h>      // close, write

#include <cerrno>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/check.h"
#include "base/redis_ping.h"  // redis_ping
#include "launch/janitor.h"
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

std::string random_hex(size_t n_bytes) {
  std::vector<unsigned char> b(n_bytes);
  size_t got = 0;
  while (got < n_bytes) {
    const ssize_t n = ::getrandom(b.data() + got, n_bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  if (got < n_bytes) {
    std::ifstream f("/dev/urandom", std::ios::binary);
    f.read(reinterpret_cast<char*>(b.data() + got), (std::streamsize)(n_bytes - got));
    MS_CHECK(f && (size_t)f.gcount() == n_bytes - got, "cannot read random bytes (getrandom, /dev/urandom)");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n_bytes);
  for (unsigned char c : b) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

namespace {

// A value for redis.conf: double-quoted, \ and " escaped (sdssplitargs reads it back).
std::string conf_quote(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '\\' || c == '"') r += '\\';
    r += c;
  }
  return r + "\"";
}

// Writes text to path, created (or truncated) with mode 0600 whatever the umask; never a symlink.
void write_private_file(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  MS_SYSCHECK(fd >= 0, "cannot create {}", path.string());
  bool ok = ::fchmod(fd, 0600) == 0;
  size_t off = 0;
  while (ok && off < text.size()) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) off += (size_t)n;
  }
  const int e = errno;
  ::close(fd);
  errno = e;
  MS_SYSCHECK(ok, "cannot write {}", path.string());
}

}  // namespace

RedisServer::RedisServer(const fs::path& dir, Janitor* janitor) : dir_(dir), janitor_(janitor) {
  const fs::path conf = dir_ / "redis.conf", logfile = dir_ / "redis.log";
  const std::string exe = "/usr/bin/redis-server";
  MS_CHECK(fs::exists(exe), "redis-server is not installed (/usr/bin/redis-server): apt-get install redis-server");
  password_ = random_hex(16);
  std::string last_error;
  try {
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    MS_SYSCHECK(devnull >= 0, "open /dev/null");
    struct FdCloser { int fd; ~FdCloser() { ::close(fd); } } devnull_closer{devnull};
    for (int attempt = 0; attempt < 5; attempt++) {
      const int port = free_loopback_port();
      // Everything in the config file: the password must not appear on a command line (ps).
      write_private_file(conf, fmt::format("bind 127.0.0.1\nport {}\nprotected-mode yes\ndaemonize no\n"
                                           "save \"\"\nappendonly no\ndir {}\nlogfile \"\"\nrequirepass {}\n",
                                           port, conf_quote(dir_.string()), password_));
      const int log = ::open(logfile.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
      MS_SYSCHECK(log >= 0, "cannot create {}", logfile.string());
      SpawnOptions so;
      so.stdin_fd = devnull;
      so.stdout_fd = log;
      so.stderr_fd = log;
      so.new_group = true;
      so.die_with_parent = true;
      try {
        pid_ = spawn({exe, conf.string()}, current_environment(), so);
      } catch (...) {
        ::close(log);
        throw;
      }
      ::close(log);
      if (janitor_) janitor_->watch_group(pid_);
      // Up once it answers AUTH + PING; a server that exits (port taken, bad config) is reaped.
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (Clock::now() < deadline) {
        int st = 0;
        const pid_t w = ::waitpid(pid_, &st, WNOHANG);
        if (w == pid_) {
          if (janitor_) janitor_->forget_group(pid_);
          pid_ = -1;
          last_error = describe_status("redis-server", st) + "\n";
          break;
        }
        if (redis_ping("127.0.0.1", port, password_, std::chrono::milliseconds(1000)).ok()) {
          url_ = fmt::format("redis://127.0.0.1:{}", port);
          port_ = port;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      stop();
      std::ifstream logf(logfile);
      std::stringstream ss;
      ss << logf.rdbuf();
      last_error += ss.str();
      // A config error quotes the offending line: never let the password reach a message.
      for (size_t at; (at = last_error.find(password_)) != std::string::npos;) last_error.replace(at, password_.size(), "***");
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
  if (pid <= 0) return;
  // Until it is reaped, the server's pid (alive or a zombie) cannot name another process group.
  ::kill(-pid, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    siginfo_t si{};
    const int rc = ::waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
    if ((rc == 0 && si.si_pid == pid) || (rc < 0 && errno != EINTR) || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(-pid, SIGKILL);  // the server after 5 s, or anything it left in its group
  int st;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  if (janitor_) {
    try {
      janitor_->forget_group(pid);
    } catch (...) {
    }
  }
}

std::optional<std::string> RedisServer::exited() {
  if (pid_ <= 0) return std::string("redis-server was stopped");
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) != pid_) return std::nullopt;
  ::kill(-pid_, SIGKILL);  // anything left in its group
  if (janitor_) {
    try {
      janitor_->forget_group(pid_);
    } catch (...) {
    }
  }
  pid_ = -1;
  return describe_status("redis-server", st);
}

std::optional<std::string> RedisServer::ping_error(std::chrono::milliseconds timeout) const {
  if (pid_ <= 0) return std::string("redis-server is not running");
  const RedisPing p = redis_ping("127.0.0.1", port_, password_, timeout);
  if (p.ok()) return std::nullopt;
  return fmt::format("redis-server at 127.0.0.1:{} does not answer {}: {}", port_, p.command, p.reason);
}

}  // namespace ms::launch
