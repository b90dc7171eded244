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
#include "launch/job_store.h"  // JobStore, PrivateDir
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

int omp_threads_per_rank(int local_ranks) { return std::max(1, usable_cores() / std::max(1, local_ranks)); }

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {

// The environment every rank shares (its RANK and LOCAL_RANK are added per rank).
std::vector<std::string> rank_base_env(const LaunchOptions& opt, const JobStore& store, const std::string& tag,
                                       const std::string& launch_dir) {
  const int n = opt.nproc;
  std::vector<std::string> env = current_environment();
  set_env(env, "WORLD_SIZE", std::to_string(n));
  set_env(env, "LOCAL_WORLD_SIZE", std::to_string(n));
  set_env(env, "MEGASCALE_BACKEND", opt.backend);
  set_env(env, "MEGASCALE_STORE", store.url());
  // Our redis-server's password reaches the ranks through their environment only (never logged).
  if (store.started_server()) set_env(env, "MEGASCALE_STORE_PASSWORD", store.password());
  set_env(env, "MEGASCALE_RUN_ID", "launch-" + tag);
  set_env(env, "MEGASCALE_HOST", "127.0.0.1");
  set_env(env, "MEGASCALE_LAUNCH_DIR", launch_dir);
  return env;
}

std::unique_ptr<Dashboard> open_dashboard(const LaunchOptions& opt, const std::string& launch_dir) {
  if (opt.dashboard_port < 0) return nullptr;
  DashboardOptions d;
  d.bind = opt.dashboard_bind;
  d.port = opt.dashboard_port;
  d.assets_dir = opt.dashboard_assets;
  d.launch_dir = launch_dir;
  d.world = opt.nproc;
  auto dash = std::make_unique<Dashboard>(d);
  launch_log().info("dashboard at {}", dash->url());
  if (const std::string w = dash->exposure_warning(); !w.empty()) launch_log().warn("{}", w);
  return dash;
}

void start_ranks(Children& children, const LaunchOptions& opt, const std::vector<std::string>& base_env, int devnull,
                 Janitor& janitor, Dashboard* dash) {
  std::vector<Child>& kids = *children;
  for (int r = 0; r < opt.nproc; r++) {
    Child& c = kids[(size_t)r];
    c.rank = r;
    c.out.out_fd = 1;
    c.err.out_fd = 2;
    c.out.keep = !opt.quiet_others || r == 0;
    std::vector<std::string> env = base_env;
    set_env(env, "RANK", std::to_string(r));
    set_env(env, "LOCAL_RANK", std::to_string(r));
    SpawnOptions so;
    so.stdin_fd = r == 0 ? -1 : devnull;
    so.new_group = true;        // signals reach the rank's own children too
    so.die_with_parent = true;  // a SIGKILLed launcher takes its ranks along
    c.pid = spawn_with_streams(opt.command, env, so, c.out, c.err);
    c.running = true;
    c.reaped = false;
    janitor.watch_group(c.pid);
    if (dash) dash->status().rank_started(r, c.pid);
  }
}

// The stop of the ranks: a signal to every group, SIGKILL at kill_at.
struct Stop {
  bool stopping = false;      // SIGTERM (or a forwarded signal) sent; SIGKILL at kill_at
  int forwarded_signal = 0;   // the first signal the launcher got and passed on
  bool killed = false;        // SIGKILL sent
  Clock::time_point kill_at{};

  void start(Children& children, int sig, const LaunchOptions& opt) {
    if (stopping) return;
    stopping = true;
    signal_groups(children.groups(), sig);
    kill_at = Clock::now() + (forwarded_signal != 0 ? opt.signal_grace : opt.grace);
  }
  void kill(Children& children) {
    signal_groups(children.groups(), SIGKILL);
    killed = true;
  }
};

// Signals to the launcher: the first is passed on (SIGHUP as SIGTERM), a second kills the ranks.
void on_launcher_signals(const std::vector<int>& sigs, Stop& stop, Children& children, LaunchResult& result,
                         const LaunchOptions& opt) {
  for (int sig : sigs) {
    if (result.failure.empty()) {
      result.failure = fmt::format("launcher got signal {} ({})", sig, signal_description(sig));
      result.exit_code = 128 + sig;
      stop.forwarded_signal = sig;
    }
    if (!stop.stopping) {
      // SIGHUP (the launch's terminal closed) asks for the same clean stop as SIGTERM: the ranks
      // save at their next step boundary and exit 0, which SIGHUP itself would not let them do.
      if (sig == SIGHUP) {
        launch_log().warn("got signal {} ({}); sending SIGTERM to the ranks", sig, signal_description(sig));
        stop.start(children, SIGTERM, opt);
      } else {
        launch_log().warn("got signal {}; forwarding it to the ranks", sig);
        stop.start(children, sig, opt);
      }
    } else if (!stop.killed) {
      launch_log().warn("second signal; killing the ranks");
      stop.kill(children);
    }
  }
}

// Ranks that ended since the last look; the first failure stops the others. Returns how many ended.
int collect_exits(Children& children, Stop& stop, LaunchResult& result, Dashboard* dash, int running,
                  const LaunchOptions& opt) {
  int ended_now = 0;
  for (auto& c : *children) {
    if (!c.running) continue;
    const std::optional<int> ended = peek_exit(c.pid);  // not reaped yet: see Child::reaped
    if (!ended) continue;
    const int st = *ended;
    c.running = false;
    c.status = st;
    ended_now++;
    if (dash) dash->status().rank_ended(c.rank, st);
    const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok && result.failure.empty()) {
      result.failure = describe_status(fmt::format("rank {}", c.rank), st);
      result.failed_rank = c.rank;
      result.exit_code = status_code(st);
      if (running - ended_now > 0) launch_log().error("{}; stopping the other ranks", result.failure);
      stop.start(children, SIGTERM, opt);
    }
  }
  return ended_now;
}

// A last look at the page for dashboard_linger_s; any signal to the launcher ends it.
void linger(const Dashboard& dash, SignalPipe& signals, const LaunchOptions& opt) {
  launch_log().info("dashboard stays at {} for {} s", dash.url(), opt.dashboard_linger_s);
  pollfd p{signals.fd(), POLLIN, 0};
  const auto until = Clock::now() + std::chrono::milliseconds((int64_t)(opt.dashboard_linger_s * 1000));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) break;
    const int rc = ::poll(&p, 1, (int)std::min<int64_t>(left, 1000));
    if (rc > 0 && !signals.drain().empty()) break;
  }
}

}  // namespace

LaunchResult run_launcher(const LaunchOptions& opt) {
  MS_CHECK(opt.nproc >= 1 && opt.nproc <= 1024, "--nproc must be in 1..1024, got {}", opt.nproc);
  MS_CHECK(!opt.command.empty(), "no command to launch");
  const std::string tag = fmt::format("{}-{}", ::getpid(), epoch_ms());
  // The guardian first: if this process dies without cleaning up (SIGKILL), it kills every rank's
  // process group and the redis-server's and removes the store and launch folders (janitor.h).
  // Destroyed last: released once everything below cleaned up itself.
  Janitor janitor(opt.janitor);
  // Handlers next: a SIGINT during redis start-up must not kill the launcher before it cleans up.
  SignalPipe signals;
  JobStore store(resolve_store(opt.store, true), opt.run_dir, tag, janitor);  // every rank is on this machine
  const int n = opt.nproc;
  PrivateDir launch_dir(opt.run_dir, "launch-" + tag, "launch", janitor);
  std::vector<std::string> base_env = rank_base_env(opt, store, tag, launch_dir.path());
  std::unique_ptr<Dashboard> dash = open_dashboard(opt, launch_dir.path());
  if (std::getenv("OMP_NUM_THREADS") == nullptr) set_env(base_env, "OMP_NUM_THREADS", std::to_string(omp_threads_per_rank(n)));

  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  MS_SYSCHECK(devnull >= 0, "open /dev/null");
  struct FdCloser { int fd; ~FdCloser() { ::close(fd); } } devnull_closer{devnull};

  Children children((size_t)n, janitor);
  std::vector<Child>& kids = *children;
  start_ranks(children, opt, base_env, devnull, janitor, dash.get());

  LaunchResult result;
  int running = n;
  Stop stop;
  Clock::time_point drain_until{};
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
    if (stop.stopping && !stop.killed) wake = std::min(wake, stop.kill_at);
    if (running == 0) wake = std::min(wake, drain_until);
    const int timeout_ms =
        (int)std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1);
    const int rc = ::poll(pfds.data(), pfds.size(), timeout_ms);
    MS_SYSCHECK(rc >= 0 || errno == EINTR, "poll");

    on_launcher_signals(signals.drain(), stop, children, result, opt);
    if (rc > 0)
      for (size_t i = 1; i < pfds.size(); i++)
        if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump(*owners[i - 1], owner_rank[i - 1]);
    running -= collect_exits(children, stop, result, dash.get(), running, opt);
    if (stop.stopping && !stop.killed && running > 0 && Clock::now() >= stop.kill_at) {
      for (auto& c : kids)
        if (c.running)
          launch_log().warn("rank {} still running {} ms after the stop signal; sending SIGKILL", c.rank,
                     opt.grace.count());
      stop.kill(children);
    }
  }
  // Every rank has ended; whatever they left in their process groups (a rank's background children)
  // ends now too, on success as well, then the ranks are reaped.
  children.reap_all();
  // A forwarded SIGTERM / SIGINT that every rank answered by finishing cleanly (a training run
  // saves a checkpoint and exits 0: preemption) is a clean stop, not a failure.
  if (stop.forwarded_signal != 0 && result.failed_rank < 0) {
    bool all_zero = true;
    for (const auto& c : kids) all_zero = all_zero && !c.running && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
    if (all_zero) {
      launch_log().info("stopped by signal {} ({}); every rank exited 0", stop.forwarded_signal,
                        signal_description(stop.forwarded_signal));
      result.failure.clear();
      result.exit_code = 0;
    }
  }
  if (!result.failure.empty()) launch_log().error("failed: {}", result.failure);
  if (dash) {
    dash->poll_now();  // the ranks' last records
    dash->status().launch_ended(result.exit_code, result.failure);
    if (opt.dashboard_linger_s > 0 && signals.drain().empty()) linger(*dash, signals, opt);
  }
  return result;
}

}  // namespace ms
