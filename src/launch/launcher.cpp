// launcher: see launcher.h. Supervision of the ranks: one event loop polls the signal self-pipe
// (signal_forwarding.h) and every child's stdout/stderr pipe (rank_output.h); on each wake-up a
// child's end is seen without reaping it (peek_exit: its pid stays a valid process group id), and
// at the end every rank's group is SIGKILLed (leftover grandchildren, on success too) and the ranks
// are reaped. The rendezvous store is a private folder (0700) or a RedisServer (redis_server.h,
// its password handed to the ranks as MEGASCALE_STORE_PASSWORD) owned for the launch's lifetime.
// Ranks are spawned with die_with_parent, and a Janitor (janitor.h) watches every rank's group, the
// redis-server's and both folders, so a SIGKILLed launcher leaves nothing behind.
#include "launch/launcher.h"

#include <fcntl.h>       // O_CLOEXEC, O_NONBLOCK, open, fcntl
#include <poll.h>        // poll
#include <sched.h>       // sched_getaffinity
#include <signal.h>      // kill, SIGTERM, SIGKILL
#include <sys/stat.h>    // mkdir, chmod
#include <sys/wait.h>    // waitpid
#include <unistd.h>      // pipe2, close, getpid

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>  // strerror
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"
#include "base/log.h"  // make_named_logger
#include "launch/dashboard.h"
#include "launch/janitor.h"
#include "launch/process.h"
#include "launch/rank_output.h"
#include "launch/redis_server.h"
#include "launch/signal_forwarding.h"
#include "base/clock.h"  // SteadyClock

namespace ms {
namespace fs = std::filesystem;
using Clock = SteadyClock;
using namespace launch;

namespace {

// The launcher's own messages on stderr, "megascale launch: <message>" (spdlog; not registered in
// spdlog's global registry, so it cannot clash with a program's loggers).
spdlog::logger& launch_log() {
  static const std::shared_ptr<spdlog::logger> logger = make_named_logger("megascale launch");
  return *logger;
}

int64_t epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A new folder parent/name of mode 0700 (only its owner may read it, whatever the umask), watched by
// the janitor from the moment it exists. Throws ms::Error naming `what` when it cannot be made.
fs::path make_private_dir(const fs::path& parent, const std::string& name, const char* what, Janitor& janitor) {
  const fs::path dir = fs::absolute(parent / name);
  std::error_code ec;
  fs::create_directories(fs::absolute(parent), ec);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    const int e = errno;
    MS_FAIL("cannot create the {} folder {}: {}", what, dir.string(), std::strerror(e));
  }
  janitor.watch_path(dir);
  if (::chmod(dir.c_str(), 0700) != 0) {
    const int e = errno;
    fs::remove_all(dir, ec);
    MS_FAIL("cannot make the {} folder {} private (mode 0700): {}", what, dir.string(), std::strerror(e));
  }
  return dir;
}

// ---- the rendezvous store -----------------------------------------------------------------------

// Owns what the store of one launch needs; cleans it up on destruction (never throws there).
class Store {
 public:
  Store(const LaunchOptions& opt, const std::string& tag, Janitor& janitor) : janitor_(janitor) {
    const fs::path parent = opt.run_dir.empty() ? fs::temp_directory_path() : fs::path(opt.run_dir);
    if (opt.store == "file") {
      dir_ = make_private_dir(parent, "store-" + tag, "store", janitor_);
      url_ = "file:" + dir_.string();
    } else if (opt.store == "redis") {
      dir_ = make_private_dir(parent, "redis-" + tag, "redis", janitor_);
      try {
        redis_.emplace(dir_, &janitor_);
      } catch (...) {
        cleanup();
        throw;
      }
      url_ = redis_->url();
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
  // The AUTH password of the redis-server this launch started; empty otherwise. Never logged.
  std::string password() const { return redis_ ? redis_->password() : std::string(); }

 private:
  void cleanup() noexcept {
    redis_.reset();  // stops the server before its folder goes
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
      try {
        janitor_.forget_path(dir_);
      } catch (...) {
      }
      dir_.clear();
    }
  }

  Janitor& janitor_;
  fs::path dir_;
  std::string url_;
  std::optional<RedisServer> redis_;
};

// ---- the launch's private folder (MEGASCALE_LAUNCH_DIR) ---------------------------------------

// A folder only this user can read, for what the ranks tell the launcher (run.json); removed on
// destruction (never throws there).
class LaunchDir {
 public:
  LaunchDir(const LaunchOptions& opt, const std::string& tag, Janitor& janitor) : janitor_(janitor) {
    const fs::path parent = opt.run_dir.empty() ? fs::temp_directory_path() : fs::path(opt.run_dir);
    dir_ = make_private_dir(parent, "launch-" + tag, "launch", janitor_);
  }
  ~LaunchDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    try {
      janitor_.forget_path(dir_);
    } catch (...) {
    }
  }
  LaunchDir(const LaunchDir&) = delete;
  LaunchDir& operator=(const LaunchDir&) = delete;
  std::string path() const { return dir_.string(); }

 private:
  Janitor& janitor_;
  fs::path dir_;
};

// ---- children -----------------------------------------------------------------------------------

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;  // started and not yet ended
  bool reaped = true;    // false from start until wait_for: an ended rank stays a zombie until then,
                         // so its pid (its process group's id) cannot be reused while we may signal it
  int status = 0;
  RankStream out, err;
};

// Owns the children: reap_all() (and the destructor, after an exception mid-launch) SIGKILLs every
// started child's process group — whatever a rank left behind too — and reaps the child.
class Children {
 public:
  Children(size_t n, Janitor& janitor) : kids_(n), janitor_(janitor) {}
  ~Children() {
    reap_all();
    for (auto& c : kids_)
      for (RankStream* s : {&c.out, &c.err})
        if (s->fd >= 0) ::close(s->fd);
  }
  void reap_all() noexcept {
    for (auto& c : kids_) {
      if (c.reaped) continue;
      ::kill(-c.pid, SIGKILL);  // the rank if it still runs, and its leftovers (grandchildren)
      int st;
      while (::waitpid(c.pid, &st, 0) < 0 && errno == EINTR) {}
      if (c.running) c.status = st;
      c.running = false;
      c.reaped = true;
      try {
        janitor_.forget_group(c.pid);
      } catch (...) {
      }
    }
  }
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  std::vector<Child>& operator*() { return kids_; }
  std::vector<Child>* operator->() { return &kids_; }
  // The process group of every child started (running or not: a rank's own children may outlive it).
  std::vector<pid_t> groups() const {
    std::vector<pid_t> g;
    for (const auto& c : kids_) g.push_back(c.pid);
    return g;
  }

 private:
  std::vector<Child> kids_;
  Janitor& janitor_;
};

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
  // The guardian first: if this process dies without cleaning up (SIGKILL), it kills every rank's
  // process group and the redis-server's and removes the store and launch folders (janitor.h).
  // Destroyed last: released once everything below cleaned up itself.
  Janitor janitor;
  // Handlers next: a SIGINT during redis start-up must not kill the launcher before it cleans up.
  SignalPipe signals;
  Store store(opt, tag, janitor);
  const int n = opt.nproc;

  std::vector<std::string> base_env = current_environment();
  set_env(base_env, "WORLD_SIZE", std::to_string(n));
  set_env(base_env, "LOCAL_WORLD_SIZE", std::to_string(n));
  set_env(base_env, "MEGASCALE_BACKEND", opt.backend);
  set_env(base_env, "MEGASCALE_STORE", store.url());
  // Our redis-server's password reaches the ranks through their environment only (never logged).
  if (const std::string pw = store.password(); !pw.empty()) set_env(base_env, "MEGASCALE_STORE_PASSWORD", pw);
  set_env(base_env, "MEGASCALE_RUN_ID", "launch-" + tag);
  set_env(base_env, "MEGASCALE_HOST", "127.0.0.1");
  LaunchDir launch_dir(opt, tag, janitor);
  set_env(base_env, "MEGASCALE_LAUNCH_DIR", launch_dir.path());
  std::unique_ptr<Dashboard> dash;
  if (opt.dashboard_port >= 0) {
    DashboardOptions d;
    d.bind = opt.dashboard_bind;
    d.port = opt.dashboard_port;
    d.assets_dir = opt.dashboard_assets;
    d.launch_dir = launch_dir.path();
    d.world = n;
    dash = std::make_unique<Dashboard>(d);
    launch_log().info("dashboard at {}", dash->url());
  }
  if (std::getenv("OMP_NUM_THREADS") == nullptr)
    set_env(base_env, "OMP_NUM_THREADS", std::to_string(std::max(1, usable_cores() / n)));

  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  MS_SYSCHECK(devnull >= 0, "open /dev/null");
  struct FdCloser { int fd; ~FdCloser() { ::close(fd); } } devnull_closer{devnull};

  Children children((size_t)n, janitor);
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
    SpawnOptions so;
    so.stdin_fd = r == 0 ? -1 : devnull;
    so.stdout_fd = out[1];
    so.stderr_fd = err[1];
    so.new_group = true;        // signals reach the rank's own children too
    so.die_with_parent = true;  // a SIGKILLed launcher takes its ranks along
    try {
      c.pid = spawn(opt.command, env, so);
    } catch (...) {
      ::close(out[1]);
      ::close(err[1]);
      throw;
    }
    c.running = true;
    c.reaped = false;
    janitor.watch_group(c.pid);
    if (dash) dash->status().rank_started(r, c.pid);
    ::close(out[1]);
    ::close(err[1]);
    for (int fd : {c.out.fd, c.err.fd}) MS_SYSCHECK(::fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "fcntl O_NONBLOCK");
  }

  LaunchResult result;
  int running = n;
  bool stopping = false;                  // SIGTERM (or a forwarded signal) sent; SIGKILL at kill_at
  int forwarded_signal = 0;               // the first signal the launcher got and passed on
  bool killed = false;                    // SIGKILL sent
  Clock::time_point kill_at{}, drain_until{};
  auto start_stopping = [&](int sig) {
    if (stopping) return;
    stopping = true;
    signal_groups(children.groups(), sig);
    kill_at = Clock::now() + (forwarded_signal != 0 ? opt.signal_grace : opt.grace);
  };

  std::vector<pollfd> pfds;
  std::vector<RankStream*> owners;
  std::vector<int> owner_rank;
  for (;;) {
    // Done when every child is reaped and its pipes are at end of file (or the drain time is over:
    // a grandchild may hold a pipe open).
    pfds.clear();
    owners.clear();
    owner_rank.clear();
    pfds.push_back({signals.fd(), POLLIN, 0});
    for (auto& c : kids)
      for (RankStream* s : {&c.out, &c.err})
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
        result.failure = fmt::format("launcher got signal {} ({})", sig, signal_description(sig));
        result.exit_code = 128 + sig;
        forwarded_signal = sig;
      }
      if (!stopping) {
        launch_log().warn("got signal {}; forwarding it to the ranks", sig);
        start_stopping(sig);
      } else if (!killed) {
        launch_log().warn("second signal; killing the ranks");
        signal_groups(children.groups(), SIGKILL);
        killed = true;
      }
    }
    if (rc > 0)
      for (size_t i = 1; i < pfds.size(); i++)
        if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[i - 1], owner_rank[i - 1]);

    for (auto& c : kids) {
      if (!c.running) continue;
      const std::optional<int> ended = peek_exit(c.pid);  // not reaped yet: see Child::reaped
      if (!ended) continue;
      const int st = *ended;
      c.running = false;
      c.status = st;
      running--;
      if (dash) dash->status().rank_ended(c.rank, st);
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && result.failure.empty()) {
        result.failure = describe_status(fmt::format("rank {}", c.rank), st);
        result.failed_rank = c.rank;
        result.exit_code = status_code(st);
        if (running > 0) launch_log().error("{}; stopping the other ranks", result.failure);
        start_stopping(SIGTERM);
      }
    }
    if (stopping && !killed && running > 0 && Clock::now() >= kill_at) {
      for (auto& c : kids)
        if (c.running)
          launch_log().warn("rank {} still running {} ms after the stop signal; sending SIGKILL", c.rank,
                     opt.grace.count());
      signal_groups(children.groups(), SIGKILL);
      killed = true;
    }
  }
  // Every rank has ended; whatever they left in their process groups (a rank's background children)
  // ends now too, on success as well, then the ranks are reaped.
  children.reap_all();
  // A forwarded SIGTERM / SIGINT that every rank answered by finishing cleanly (a training run
  // saves a checkpoint and exits 0: preemption) is a clean stop, not a failure.
  if (forwarded_signal != 0 && result.failed_rank < 0) {
    bool all_zero = true;
    for (const auto& c : kids) all_zero = all_zero && !c.running && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
    if (all_zero) {
      launch_log().info("stopped by signal {} ({}); every rank exited 0", forwarded_signal,
                        signal_description(forwarded_signal));
      result.failure.clear();
      result.exit_code = 0;
    }
  }
  if (!result.failure.empty()) launch_log().error("failed: {}", result.failure);
  if (dash) {
    dash->poll_now();  // the ranks' last records
    dash->status().launch_ended(result.exit_code, result.failure);
    if (opt.dashboard_linger_s > 0 && signals.drain().empty()) {
      // A last look at the page; any signal to the launcher ends it.
      launch_log().info("dashboard stays at {} for {} s", dash->url(), opt.dashboard_linger_s);
      pollfd p{signals.fd(), POLLIN, 0};
      const auto until = Clock::now() + std::chrono::milliseconds((int64_t)(opt.dashboard_linger_s * 1000));
      for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        if (left <= 0) break;
        const int rc = ::poll(&p, 1, (int)std::min<int64_t>(left, 1000));
        if (rc > 0 && !signals.drain().empty()) break;
      }
    }
  }
  return result;
}

}  // namespace ms
