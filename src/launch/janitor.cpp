// janitor: see janitor.h. The wire protocol, owner -> janitor, one line each (no newline inside):
//   O <pid>    the owner's pid (the janitor also acts when its parent is no longer this pid)
//   G <pgid>   / g <pgid>   watch / forget a process group
//   P <path>   / p <path>   watch / forget a path
//   R          release: exit without acting
// janitor -> owner, once: "megascale janitor ready\n" (the greeting). End of file without "R" = act.
#include "launch/janitor.h"

#include <dirent.h>      // opendir (the /proc scan)
#include <fcntl.h>       // open, O_CLOEXEC
#include <poll.h>        // poll
#include <signal.h>      // kill, signal
#include <sys/prctl.h>   // PR_SET_NAME
#include <sys/socket.h>  // socketpair, send, MSG_NOSIGNAL
#include <sys/wait.h>    // waitpid
#include <unistd.h>      // close_range, getppid, read, write

#include <cerrno>
#include <chrono>
#include <cstdio>   // sscanf
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "base/check.h"
#include "launch/process.h"

namespace ms::launch {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::string_view kGreeting = "megascale janitor ready\n";

// Reaps pid within `limit` (WNOHANG polls), else SIGKILLs it (and its group) and reaps it.
void reap_or_kill(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  int st;
  for (;;) {
    const pid_t w = ::waitpid(pid, &st, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) return;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
}

}  // namespace

// ---- the owner's side ---------------------------------------------------------------------------

Janitor::Janitor(const std::vector<std::string>& command) {
  MS_CHECK(!command.empty(), "janitor: no command to start it with (the application's)");
  int sv[2];
  MS_SYSCHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "janitor: socketpair");
  const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) {
    const int e = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    errno = e;
    MS_SYSCHECK(false, "janitor: open /dev/null");
  }
  SpawnOptions so;
  so.stdin_fd = sv[1];
  so.stdout_fd = devnull;
  so.new_group = true;  // out of reach of a signal to the owner's group; never die_with_parent
  try {
    pid_ = spawn(command, current_environment(), so);
  } catch (...) {
    ::close(sv[0]);
    ::close(sv[1]);
    ::close(devnull);
    throw;
  }
  ::close(sv[1]);
  ::close(devnull);
  fd_ = sv[0];
  // The greeting, within 10 s: else the program is not a janitor (or hangs); kill it.
  std::string got;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (got.size() < kGreeting.size() && got.find('\n') == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, (int)left);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) break;
    char buf[64];
    const ssize_t n = ::read(fd_, buf, std::min(sizeof buf, kGreeting.size() - got.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got.append(buf, (size_t)n);
  }
  if (got != kGreeting) {
    ::close(fd_);
    fd_ = -1;
    reap_or_kill(pid_, std::chrono::milliseconds(0));
    pid_ = -1;
    MS_FAIL("cannot start the janitor: `{}` did not greet (not a megascale binary?)", fmt::join(command, " "));
  }
  try {
    send(fmt::format("O {}", ::getpid()));
  } catch (...) {
    release();
    throw;
  }
}

void Janitor::send(const std::string& line) {
  MS_CHECK(fd_ >= 0, "the janitor was released");
  const std::string msg = line + "\n";
  size_t off = 0;
  while (off < msg.size()) {
    const ssize_t n = ::send(fd_, msg.data() + off, msg.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    MS_SYSCHECK(n > 0, "the janitor (pid {}) is gone", pid_);
    off += (size_t)n;
  }
}

void Janitor::watch_group(pid_t pgid) {
  MS_CHECK(pgid > 1, "janitor: refusing to watch process group {}", pgid);
  std::lock_guard lk(mu_);
  send(fmt::format("G {}", pgid));
}

void Janitor::forget_group(pid_t pgid) {
  std::lock_guard lk(mu_);
  send(fmt::format("g {}", pgid));
}

namespace {
std::string checked_path(const fs::path& path) {
  const std::string p = fs::absolute(path).string();
  MS_CHECK(p.find('\n') == std::string::npos, "janitor: a path with a newline: {}", p);
  return p;
}
}  // namespace

void Janitor::watch_path(const fs::path& path) {
  const std::string p = checked_path(path);
  std::lock_guard lk(mu_);
  send("P " + p);
}

void Janitor::forget_path(const fs::path& path) {
  const std::string p = checked_path(path);
  std::lock_guard lk(mu_);
  send("p " + p);
}

void Janitor::release() noexcept {
  std::lock_guard lk(mu_);
  if (fd_ >= 0) {
    static constexpr char kRelease[] = "R\n";
    [[maybe_unused]] ssize_t n;
    do n = ::send(fd_, kRelease, sizeof kRelease - 1, MSG_NOSIGNAL); while (n < 0 && errno == EINTR);
    ::close(fd_);
    fd_ = -1;
  }
  if (pid_ > 0) {
    reap_or_kill(pid_, std::chrono::milliseconds(5000));
    pid_ = -1;
  }
}

// ---- the janitor process ------------------------------------------------------------------------

namespace {

void say(const std::string& s) {
  const std::string line = "megascale janitor: " + s + "\n";
  [[maybe_unused]] ssize_t n = ::write(2, line.data(), line.size());
}

// The process groups among `groups` that still have a live (not zombie) member (a /proc scan).
std::set<pid_t> live_groups(const std::set<pid_t>& groups) {
  std::set<pid_t> live;
  DIR* d = ::opendir("/proc");
  if (!d) return groups;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    if (!std::getline(f, stat)) continue;
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) continue;
    const char state = stat[close + 2];
    if (state == 'Z' || state == 'X') continue;
    // After ") S ": ppid pgrp ...
    long ppid = 0, pgrp = 0;
    if (std::sscanf(stat.c_str() + close + 3, "%ld %ld", &ppid, &pgrp) != 2) continue;
    if (groups.count((pid_t)pgrp)) live.insert((pid_t)pgrp);
  }
  ::closedir(d);
  return live;
}

// A registered path the janitor may remove: absolute, no "..", not "/".
bool removable(const fs::path& p) {
  if (!p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  const fs::path n = p.lexically_normal();
  return !n.empty() && n != n.root_path() && n.relative_path() != "." && !n.relative_path().empty();
}

int act(pid_t owner, const std::set<pid_t>& groups, const std::set<std::string>& paths) {
  std::set<pid_t> signalled;
  for (pid_t g : groups)
    if (g > 1 && g != ::getpgrp() && ::kill(-g, SIGKILL) == 0) signalled.insert(g);
  // Dead before their folders go (a dying rank must not recreate files); zombies count as gone.
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (!signalled.empty() && Clock::now() < deadline) {
    signalled = live_groups(signalled);
    if (!signalled.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int removed = 0;
  for (const std::string& s : paths) {
    const fs::path p(s);
    if (!removable(p)) continue;
    std::error_code ec;
    if (fs::remove_all(p, ec) > 0 && !ec) removed++;
  }
  if (!groups.empty() || !paths.empty())
    say(fmt::format("owner {} is gone; killed {} process group(s), removed {} path(s)", owner, groups.size(),
                    removed));
  return 0;
}

}  // namespace

int janitor_main() {
  ::prctl(PR_SET_NAME, "ms-janitor", 0, 0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2})
    ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Nothing inherited but stdin (the owner's socket) and stderr; stdout is /dev/null.
  const int devnull = ::open("/dev/null", O_WRONLY);
  if (devnull >= 0 && devnull != 1) {
    ::dup2(devnull, 1);
    ::close(devnull);
  }
  ::close_range(3, ~0U, 0);
  const pid_t first_parent = ::getppid();
  {
    size_t off = 0;
    while (off < kGreeting.size()) {
      const ssize_t n = ::write(0, kGreeting.data() + off, kGreeting.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return 1;  // not a socket, or the owner is already gone (nothing registered yet)
      off += (size_t)n;
    }
  }
  pid_t owner = first_parent;
  std::set<pid_t> groups;
  std::set<std::string> paths;
  std::string buf;
  char chunk[4096];
  for (;;) {
    pollfd p{0, POLLIN, 0};
    const int rc = ::poll(&p, 1, 1000);
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) {
      if (::getppid() != owner) return act(owner, groups, paths);  // reparented: the owner died
      continue;
    }
    const ssize_t n = ::read(0, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return act(owner, groups, paths);  // end of file: the owner is gone
    buf.append(chunk, (size_t)n);
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      const std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (line.empty()) continue;
      const char op = line[0];
      const std::string arg = line.size() > 2 ? line.substr(2) : "";
      const long num = std::strtol(arg.c_str(), nullptr, 10);
      switch (op) {
        case 'R': return 0;
        case 'O': if (num > 1) owner = (pid_t)num; break;
        case 'G': if (num > 1) groups.insert((pid_t)num); break;
        case 'g': groups.erase((pid_t)num); break;
        case 'P': if (!arg.empty()) paths.insert(arg); break;
        case 'p': paths.erase(arg); break;
        default: break;
      }
    }
  }
}

}  // namespace ms::launch
