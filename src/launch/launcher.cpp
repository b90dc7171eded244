// launcher: see launcher.h. One event loop polls a self-pipe (signals and SIGCHLD) and every
// child's stdout/stderr pipe; children are reaped with waitpid(WNOHANG) on each wake-up.
#include "launch/launcher.h"

#include <arpa/inet.h>   // inet_pton, htons
#include <fcntl.h>       // O_CLOEXEC, O_NONBLOCK, open
#include <netinet/in.h>  // sockaddr_in
#include <poll.h>        // poll
#include <sched.h>       // sched_getaffinity
#include <signal.h>      // sigaction, kill
#include <spawn.h>       // posix_spawn
#include <sys/socket.h>  // socket, bind, connect
#include <sys/wait.h>    // waitpid
#include <unistd.h>      // pipe2, read, write, close, getpid

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"

extern char** environ;

namespace ms {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// ---- small syscall helpers ----------------------------------------------------------------------

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, 100);
      continue;
    }
    if (w < 0 && errno == EPIPE) return;  // nobody reads our output any more: drop it
    MS_SYSCHECK(w >= 0, "write to fd {}", fd);
    p += w;
    n -= (size_t)w;
  }
}

void say(const std::string& msg) {
  std::string line = "megascale launch: " + msg + "\n";
  write_all(2, line.data(), line.size());
}

std::string describe_status(int rank, int status) {
  if (WIFEXITED(status)) return fmt::format("rank {} exited with code {}", rank, WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("rank {} killed by signal {} ({})", rank, sig, sigdescr_np(sig) ? sigdescr_np(sig) : "?");
  }
  return fmt::format("rank {} ended with wait status {}", rank, status);
}

int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A free TCP port on 127.0.0.1 (the kernel's choice; it may be taken again before use, callers retry).
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

bool tcp_accepts(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  MS_SYSCHECK(s >= 0, "socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(s, (sockaddr*)&a, sizeof a) == 0;
  ::close(s);
  return ok;
}

// True while pid names a live (not zombie) process whose command is `comm`.
bool process_alive(pid_t pid, const std::string& comm) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!f || !std::getline(f, stat)) return false;
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= stat.size()) return false;
  if (!comm.empty() && stat.substr(open + 1, close - open - 1).rfind(comm.substr(0, 15), 0) != 0) return false;
  return stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

// posix_spawn of argv with env; stdout/stderr to the given fds (-1: inherit), stdin from stdin_fd
// (-1: inherit), in a new process group when new_group.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int stdin_fd, int stdout_fd,
            int stderr_fd, bool new_group) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  int rc = posix_spawn_file_actions_init(&fa);
  errno = rc;
  MS_SYSCHECK(rc == 0, "posix_spawn_file_actions_init");
  rc = posix_spawnattr_init(&at);
  errno = rc;
  MS_SYSCHECK(rc == 0, "posix_spawnattr_init");
  if (stdin_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
  if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdout_fd, 1);
  if (stderr_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stderr_fd, 2);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&defaults, s);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (new_group) flags |= POSIX_SPAWN_SETPGROUP;
  posix_spawnattr_setflags(&at, flags);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &defaults);
  posix_spawnattr_setpgroup(&at, 0);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid = -1;
  rc = posix_spawn(&pid, cargv[0], &fa, &at, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  errno = rc;
  MS_SYSCHECK(rc == 0, "cannot start {}", argv[0]);
  return pid;
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; e++) env.emplace_back(*e);
  return env;
}

// env with NAME=value set (replacing any NAME=...).
void set_env(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  const std::string key = name + "=";
  env.erase(std::remove_if(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(key, 0) == 0; }),
            env.end());
  env.push_back(key + value);
}

// ---- the rendezvous store -----------------------------------------------------------------------

// Owns what the store of one launch needs; cleans it up on destruction (never throws there).
class Store {
 public:
  Store(const LaunchOptions& opt, const std::string& tag) {
    const fs::path parent = opt.run_dir.empty() ? fs::temp_directory_path() : fs::path(opt.run_dir);
    if (opt.store == "file") {
      dir_ = parent / ("store-" + tag);
      std::error_code ec;
      fs::create_directories(parent, ec);
      MS_CHECK(fs::create_directory(dir_, ec) && !ec, "cannot create the store folder {}: {}", dir_.string(),
               ec ? ec.message() : "it exists");
      url_ = "file:" + dir_.string();
    } else if (opt.store == "redis") {
      dir_ = parent / ("redis-" + tag);
      std::error_code ec;
      fs::create_directories(parent, ec);
      MS_CHECK(fs::create_directory(dir_, ec) && !ec, "cannot create the redis folder {}: {}", dir_.string(),
               ec ? ec.message() : "it exists");
      try {
        start_redis();
      } catch (...) {
        cleanup();
        throw;
      }
    } else if (opt.store.rfind("redis://", 0) == 0) {
      url_ = opt.store;
    } else {
      MS_FAIL("unknown store '{}': use file, redis or redis://host:port", opt.store);
    }
  }
  ~Store() { cleanup(); }
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& url() const { return url_; }

 private:
  void cleanup() noexcept {
    if (redis_pid_ > 0) stop_redis();
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
      dir_.clear();
    }
  }

  void start_redis() {
    const std::string pidfile = (dir_ / "redis.pid").string(), logfile = (dir_ / "redis.log").string();
    std::string last_error;
    for (int attempt = 0; attempt < 5; attempt++) {
      const int port = free_loopback_port();
      fs::remove(pidfile);
      const std::vector<std::string> argv = {"/usr/bin/redis-server", "--bind", "127.0.0.1", "--port",
                                             std::to_string(port), "--save", "", "--appendonly", "no",
                                             "--daemonize", "yes", "--pidfile", pidfile, "--logfile", logfile,
                                             "--dir", dir_.string()};
      const std::string exe = fs::exists(argv[0]) ? argv[0] : "redis-server";
      std::vector<std::string> args = argv;
      args[0] = exe;
      MS_CHECK(fs::exists(args[0]), "redis-server is not installed (/usr/bin/redis-server): apt-get install redis-server");
      pid_t p = spawn(args, current_environment(), -1, -1, -1, false);
      int st = 0;
      pid_t w;
      do w = ::waitpid(p, &st, 0); while (w < 0 && errno == EINTR);
      MS_SYSCHECK(w == p, "waitpid redis-server");
      MS_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "redis-server failed to start ({})", describe_status(0, st));
      // The daemon writes its pidfile after it listens; then it must accept a connection.
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      while (Clock::now() < deadline) {
        std::ifstream f(pidfile);
        long pid = 0;
        if (f >> pid && pid > 0) {
          redis_pid_ = (pid_t)pid;
          if (tcp_accepts(port)) {
            url_ = fmt::format("redis://127.0.0.1:{}", port);
            return;
          }
        }
        if (redis_pid_ > 0 && !process_alive(redis_pid_, "redis-server")) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (redis_pid_ > 0) stop_redis();
      std::ifstream log(logfile);
      std::stringstream ss;
      ss << log.rdbuf();
      last_error = ss.str();
      if (last_error.size() > 600) last_error = last_error.substr(last_error.size() - 600);
    }
    MS_FAIL("redis-server did not come up on 127.0.0.1 (5 attempts); its log ends:\n{}", last_error);
  }

  void stop_redis() {
    const pid_t pid = redis_pid_;
    redis_pid_ = -1;
    if (!process_alive(pid, "redis-server")) return;
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

  fs::path dir_;
  std::string url_;
  pid_t redis_pid_ = -1;
};

// ---- signals ------------------------------------------------------------------------------------

std::atomic<int> g_signal_pipe{-1};

extern "C" void on_signal(int sig) {
  const int saved = errno;
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    unsigned char b = (unsigned char)sig;
    [[maybe_unused]] ssize_t r = ::write(fd, &b, 1);
  }
  errno = saved;
}

// Installs the handlers (SIGINT, SIGTERM, SIGHUP forwarded; SIGCHLD wakes the loop; SIGPIPE ignored)
// with a self-pipe, and restores the previous ones on destruction.
class SignalPipe {
 public:
  SignalPipe() {
    int fds[2];
    MS_SYSCHECK(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2");
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    g_signal_pipe.store(write_fd_);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < kSignals.size(); i++) {
      struct sigaction use = sa;
      if (kSignals[i] == SIGPIPE) use.sa_handler = SIG_IGN;
      if (kSignals[i] == SIGCHLD) use.sa_flags |= SA_NOCLDSTOP;
      MS_SYSCHECK(::sigaction(kSignals[i], &use, &old_[i]) == 0, "sigaction");
    }
  }
  ~SignalPipe() {
    for (size_t i = 0; i < kSignals.size(); i++) ::sigaction(kSignals[i], &old_[i], nullptr);
    g_signal_pipe.store(-1);
    ::close(read_fd_);
    ::close(write_fd_);
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_fd_; }
  // Signals received since the last call (SIGCHLD left out).
  std::vector<int> drain() {
    std::vector<int> sigs;
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(read_fd_, buf, sizeof buf)) > 0)
      for (ssize_t i = 0; i < n; i++)
        if (buf[i] != SIGCHLD) sigs.push_back(buf[i]);
    return sigs;
  }

 private:
  static constexpr std::array<int, 5> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};
  int read_fd_ = -1, write_fd_ = -1;
  std::array<struct sigaction, 5> old_{};
};

// ---- children -----------------------------------------------------------------------------------

// One output stream of a child: its pipe and the unfinished last line.
struct Stream {
  int fd = -1;
  int out_fd = 1;     // where its lines go (1 or 2)
  bool keep = true;   // forward (false: read and drop)
  std::string partial;
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out, err;
};

void forward(Stream& s, int rank, const char* data, size_t n, bool eof) {
  if (!s.keep) return;
  s.partial.append(data, n);
  const std::string prefix = fmt::format("[rank {}] ", rank);
  std::string lines;
  size_t start = 0, nl;
  while ((nl = s.partial.find('\n', start)) != std::string::npos) {
    lines += prefix;
    lines.append(s.partial, start, nl + 1 - start);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  // A very long line or the end of the stream: flush what there is as a line of its own.
  if ((eof && !s.partial.empty()) || s.partial.size() > (1u << 16)) {
    lines += prefix + s.partial + "\n";
    s.partial.clear();
  }
  if (!lines.empty()) write_all(s.out_fd, lines.data(), lines.size());
}

// Reads what is available on s.fd; closes it at end of file.
void pump(Stream& s, int rank) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {  // end of file (or a read error, treated as the end)
      forward(s, rank, nullptr, 0, true);
      ::close(s.fd);
      s.fd = -1;
      return;
    }
    forward(s, rank, buf, (size_t)n, false);
    if ((size_t)n < sizeof buf) return;
  }
}

// Owns the children: on destruction (an exception mid-launch) kills and reaps whoever still runs.
class Children {
 public:
  explicit Children(size_t n) : kids_(n) {}
  ~Children() {
    for (auto& c : kids_) {
      if (c.running) {
        ::kill(-c.pid, SIGKILL);
        int st;
        while (::waitpid(c.pid, &st, 0) < 0 && errno == EINTR) {}
        c.running = false;
      }
      for (Stream* s : {&c.out, &c.err})
        if (s->fd >= 0) ::close(s->fd);
    }
  }
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  std::vector<Child>& operator*() { return kids_; }
  std::vector<Child>* operator->() { return &kids_; }

 private:
  std::vector<Child> kids_;
};

void signal_groups(std::vector<Child>& kids, int sig, bool all) {
  for (auto& c : kids)
    if (c.pid > 0 && (c.running || all)) ::kill(-c.pid, sig);  // the child's whole process group
}

}  // namespace

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

LaunchResult run_launcher(const LaunchOptions& opt) {
  MS_CHECK(opt.nproc >= 1 && opt.nproc <= 1024, "--nproc must be in 1..1024, got {}", opt.nproc);
  MS_CHECK(!opt.command.empty(), "no command to launch");
  const std::string tag = fmt::format("{}-{}", ::getpid(), epoch_ms());
  // Handlers first: a SIGINT during redis start-up must not kill the launcher before it cleans up.
  SignalPipe signals;
  Store store(opt, tag);
  const int n = opt.nproc;

  std::vector<std::string> base_env = current_environment();
  set_env(base_env, "WORLD_SIZE", std::to_string(n));
  set_env(base_env, "LOCAL_WORLD_SIZE", std::to_string(n));
  set_env(base_env, "MEGASCALE_BACKEND", opt.backend);
  set_env(base_env, "MEGASCALE_STORE", store.url());
  set_env(base_env, "MEGASCALE_RUN_ID", "launch-" + tag);
  set_env(base_env, "MEGASCALE_HOST", "127.0.0.1");
  if (std::getenv("OMP_NUM_THREADS") == nullptr)
    set_env(base_env, "OMP_NUM_THREADS", std::to_string(std::max(1, usable_cores() / n)));

  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  MS_SYSCHECK(devnull >= 0, "open /dev/null");
  struct FdCloser { int fd; ~FdCloser() { ::close(fd); } } devnull_closer{devnull};

  Children children((size_t)n);
  std::vector<Child>& kids = *children;
  for (int r = 0; r < n; r++) {
    Child& c = kids[(size_t)r];
    c.rank = r;
    int out[2], err[2];
    MS_SYSCHECK(::pipe2(out, O_CLOEXEC) == 0, "pipe2");
    c.out.fd = out[0];
    MS_SYSCHECK(::pipe2(err, O_CLOEXEC) == 0, "pipe2");
    c.err.fd = err[0];
    c.out.out_fd = 1;
    c.err.out_fd = 2;
    c.out.keep = !opt.quiet_others || r == 0;
    std::vector<std::string> env = base_env;
    set_env(env, "RANK", std::to_string(r));
    set_env(env, "LOCAL_RANK", std::to_string(r));
    try {
      c.pid = spawn(opt.command, env, r == 0 ? -1 : devnull, out[1], err[1], true);
    } catch (...) {
      ::close(out[1]);
      ::close(err[1]);
      throw;
    }
    c.running = true;
    ::close(out[1]);
    ::close(err[1]);
    for (int fd : {c.out.fd, c.err.fd}) MS_SYSCHECK(::fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "fcntl O_NONBLOCK");
  }

  LaunchResult result;
  int running = n;
  bool stopping = false;                  // SIGTERM (or a forwarded signal) sent; SIGKILL at kill_at
  bool killed = false;                    // SIGKILL sent
  Clock::time_point kill_at{}, drain_until{};
  auto start_stopping = [&](int sig) {
    if (stopping) return;
    stopping = true;
    signal_groups(kids, sig, true);
    kill_at = Clock::now() + opt.grace;
  };

  std::vector<pollfd> pfds;
  std::vector<Stream*> owners;
  std::vector<int> owner_rank;
  for (;;) {
    // Done when every child is reaped and its pipes are at end of file (or the drain time is over:
    // a grandchild may hold a pipe open).
    pfds.clear();
    owners.clear();
    owner_rank.clear();
    pfds.push_back({signals.fd(), POLLIN, 0});
    for (auto& c : kids)
      for (Stream* s : {&c.out, &c.err})
        if (s->fd >= 0) {
          pfds.push_back({s->fd, POLLIN, 0});
          owners.push_back(s);
          owner_rank.push_back(c.rank);
        }
    const auto now = Clock::now();
    if (running == 0) {
      if (drain_until == Clock::time_point{}) drain_until = now + std::chrono::milliseconds(500);
      if (owners.empty() || now >= drain_until) break;
    }
    auto wake = now + std::chrono::seconds(1);
    if (stopping && !killed) wake = std::min(wake, kill_at);
    if (running == 0) wake = std::min(wake, drain_until);
    const int timeout_ms =
        (int)std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1);
    const int rc = ::poll(pfds.data(), pfds.size(), timeout_ms);
    MS_SYSCHECK(rc >= 0 || errno == EINTR, "poll");

    for (int sig : signals.drain()) {
      if (result.failure.empty()) {
        result.failure = fmt::format("launcher got signal {} ({})", sig, sigdescr_np(sig) ? sigdescr_np(sig) : "?");
        result.exit_code = 128 + sig;
      }
      if (!stopping) {
        say(fmt::format("got signal {}; forwarding it to the ranks", sig));
        start_stopping(sig);
      } else if (!killed) {
        say("second signal; killing the ranks");
        signal_groups(kids, SIGKILL, true);
        killed = true;
      }
    }
    if (rc > 0)
      for (size_t i = 1; i < pfds.size(); i++)
        if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[i - 1], owner_rank[i - 1]);

    for (auto& c : kids) {
      if (!c.running) continue;
      int st = 0;
      pid_t w = ::waitpid(c.pid, &st, WNOHANG);
      if (w < 0 && errno == EINTR) continue;
      MS_SYSCHECK(w >= 0, "waitpid rank {}", c.rank);
      if (w == 0) continue;
      c.running = false;
      c.status = st;
      running--;
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && result.failure.empty()) {
        result.failure = describe_status(c.rank, st);
        result.failed_rank = c.rank;
        result.exit_code = status_code(st);
        if (running > 0) say(result.failure + "; stopping the other ranks");
        start_stopping(SIGTERM);
      }
    }
    if (stopping && !killed && running > 0 && Clock::now() >= kill_at) {
      for (auto& c : kids)
        if (c.running)
          say(fmt::format("rank {} still running {} ms after the stop signal; sending SIGKILL", c.rank,
                          opt.grace.count()));
      signal_groups(kids, SIGKILL, true);
      killed = true;
    }
  }
  if (!result.failure.empty()) say("failed: " + result.failure);
  return result;
}

}  // namespace ms
