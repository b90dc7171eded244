// launcher: see launcher.h. Supervision of the ranks: one event loop polls the signal self-pipe
// (signal_forwarding.h) and every child's stdout/stderr pipe (rank_output.h); children are reaped
// with waitpid(WNOHANG) on each wake-up. The rendezvous store is a folder or a RedisServer
// (redis_server.h) owned for the launch's lifetime.
#include "launch/launcher.h"

#include <fcntl.h>       // O_CLOEXEC, O_NONBLOCK, open, fcntl
#include <poll.h>        // poll
#include <sched.h>       // sched_getaffinity
#include <signal.h>      // kill, SIGTERM, SIGKILL
#include <sys/wait.h>    // waitpid
#include <unistd.h>      // pipe2, close, getpid

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"
#include "base/log.h"  // make_named_logger
#include "launch/dashboard.h"
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
        redis_.emplace(dir_);
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

 private:
  void cleanup() noexcept {
    redis_.reset();  // stops the server before its folder goes
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
      dir_.clear();
    }
  }

  fs::path dir_;
  std::string url_;
  std::optional<RedisServer> redis_;
};

// ---- the launch's private folder (MEGASCALE_LAUNCH_DIR) ---------------------------------------

// A folder only this user can read, for what the ranks tell the launcher (run.json); removed on
// destruction (never throws there).
class LaunchDir {
 public:
  LaunchDir(const LaunchOptions& opt, const std::string& tag) {
    const fs::path parent = opt.run_dir.empty() ? fs::temp_directory_path() : fs::path(opt.run_dir);
    dir_ = parent / ("launch-" + tag);
    std::error_code ec;
    fs::create_directories(parent, ec);
    MS_CHECK(fs::create_directory(dir_, ec) && !ec, "cannot create the launch folder {}: {}", dir_.string(),
             ec ? ec.message() : "it exists");
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) {
      fs::remove_all(dir_, ec);
      MS_FAIL("cannot make the launch folder {} private (mode 0700): {}", dir_.string(), ec.message());
    }
  }
  ~LaunchDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  LaunchDir(const LaunchDir&) = delete;
  LaunchDir& operator=(const LaunchDir&) = delete;
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

// ---- children -----------------------------------------------------------------------------------

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  RankStream out, err;
};

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
      for (RankStream* s : {&c.out, &c.err})
        if (s->fd >= 0) ::close(s->fd);
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
  LaunchDir launch_dir(opt, tag);
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
      int st = 0;
      pid_t w = ::waitpid(c.pid, &st, WNOHANG);
      if (w < 0 && errno == EINTR) continue;
      MS_SYSCHECK(w >= 0, "waitpid rank {}", c.rank);
      if (w == 0) continue;
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
