// driver: see driver.h. One event loop polls every executor's stdout (reports) and the signal
// self-pipe; the job moves through phases: running an attempt -> stopping its ranks -> self-checks
// -> the next attempt (or the end).
#include "launch/driver.h"

#include <fcntl.h>      // fcntl, O_NONBLOCK
#include <poll.h>       // poll
#include <signal.h>     // kill
#include <sys/wait.h>   // waitpid
#include <unistd.h>     // pipe2, close, getpid

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "base/atomic_file.h"  // write_text_atomic
#include "base/check.h"
#include "base/log.h"          // make_named_logger
#include "launch/dashboard.h"
#include "launch/event_log.h"
#include "launch/heartbeat.h"
#include "launch/janitor.h"
#include "launch/host_launcher.h"
#include "launch/job_store.h"
#include "launch/job_summary.h"
#include "launch/output_queue.h"
#include "launch/process.h"
#include "launch/recovery_policy.h"
#include "launch/run_folder.h"
#include "launch/selfcheck_plan.h"
#include "launch/signal_forwarding.h"
#include "report/diagnose.h"   // diagnose_run

namespace ms::launch {

namespace fs = std::filesystem;
using Clock = DriverClock;
using nlohmann::json;

namespace {

// The driver's stderr (its own messages, kept; the executors' stderr, dropped when nobody reads).
std::shared_ptr<OutputQueue> err_queue() {
  static const auto q = std::make_shared<OutputQueue>(2, 1 << 20, "megascale launch: ");
  return q;
}
spdlog::logger& dlog() {
  static const std::shared_ptr<spdlog::logger> logger = make_queue_logger("megascale launch", err_queue());
  return *logger;
}

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Host {
  HostSpec spec;
  pid_t pid = -1;          // the executor (leader of its process group)
  int to_fd = -1, from_fd = -1, err_fd = -1;  // its stdin, stdout (reports) and stderr
  LineReader reader, err_reader;
  bool up = false;         // said hello
  bool alive = false;      // executor running and its channel open
  bool excluded = false;
  std::string excluded_why;
  bool active = false;     // runs ranks in the current attempt
  std::vector<int> ranks;  // world ranks in the current attempt
  Clock::time_point last_beat{};
  HostBeat last;           // the last heartbeat
  std::optional<SelfCheckReport> check;  // the current self-check round's report
};

enum class Phase { kRunning, kStopping, kSelfCheck, kDraining, kDone };

// A detected fault: what, who, where, and when (the event log's clock).
struct Fault : FaultRecord {
  double detected_mono = 0;
};

class Driver {
 public:
  explicit Driver(const DriverOptions& opt) : opt_(opt), progress_(opt.stall), traffic_(opt.traffic_timeout_s),
                                              loss_(opt.loss_window, opt.loss_z),
                                              retry_(opt.same_failure_limit, opt.max_restarts) {
    MS_CHECK(opt.nproc_per_host >= 1 && opt.nproc_per_host <= 1024, "--nproc-per-host must be in 1..1024");
    MS_CHECK(!opt.command.empty(), "no command to launch");
    MS_CHECK(opt.loss_spike_action == "warn" || opt.loss_spike_action == "restart",
             "--loss-spike-action must be warn or restart, got '{}'", opt.loss_spike_action);
    launcher_ = make_host_launcher(opt.host_launcher);
    for (const HostSpec& s : parse_hosts(opt.hosts)) {
      hosts_.emplace_back();
      hosts_.back().spec = s;
    }
    MS_CHECK(opt.spare_hosts >= 0 && opt.spare_hosts < (int)hosts_.size(),
             "--spare-hosts {} leaves no host to run on ({} host(s))", opt.spare_hosts, hosts_.size());
    wanted_hosts_ = (int)hosts_.size() - opt.spare_hosts;
    tag_ = fmt::format("{}-{}", ::getpid(), (int64_t)(unix_seconds() * 1000));
    bool all_local = true;
    for (const Host& h : hosts_) all_local = all_local && h.spec.local;
    std::string store = opt.store == "auto" ? (all_local ? "file" : "redis") : opt.store;
    folders_ = std::make_unique<PrivateDir>(opt.run_dir, "launch-" + tag_, "launch", janitor_);
    MS_CHECK(all_local || store != "file", "--store file needs every host on this machine; use redis or redis://host:port");
    MS_CHECK(all_local || store != "redis", "--store redis starts a server on loopback, which other hosts cannot reach; "
             "start one they can and give --store redis://host:port (password in MEGASCALE_STORE_PASSWORD)");
    store_ = std::make_unique<JobStore>(store, opt.run_dir, tag_, janitor_);
    const std::string log_dir = opt.log_dir.empty() ? (fs::path("megascale-launch") / ("job-" + tag_)).string() : opt.log_dir;
    std::error_code ec;
    fs::create_directories(log_dir, ec);
    MS_CHECK(!ec, "cannot create the log folder {}: {}", log_dir, ec.message());
    log_dir_ = log_dir;
    events_ = std::make_unique<EventLog>((fs::path(log_dir) / "events.jsonl").string());
    if (opt.dashboard_port >= 0) {
      DashboardOptions d;
      d.bind = opt.dashboard_bind;
      d.port = opt.dashboard_port;
      d.assets_dir = opt.dashboard_assets;
      d.launch_dir = folders_->path();
      d.world = wanted_hosts_ * opt.nproc_per_host;
      dash_ = std::make_unique<Dashboard>(d);
      dlog().info("dashboard at {}", dash_->url());
      if (const std::string w = dash_->exposure_warning(); !w.empty()) dlog().warn("{}", w);
    }
  }

  ~Driver() {
    for (Host& h : hosts_) end_executor(h, true);
  }

  DriverResult run() {
    now_ = clock_.tick(Clock::now());
    start_ = Clock::now();
    events_->log("job_start", {{"hosts", opt_.hosts}, {"nproc_per_host", opt_.nproc_per_host},
                               {"spare_hosts", opt_.spare_hosts}, {"command", opt_.command},
                               {"store", store_->kind()}, {"log_dir", log_dir_}});
    for (Host& h : hosts_) start_executor(h);
    wait_for_hellos();
    if (result_.reason.empty()) start_attempt();
    while (phase_ != Phase::kDone) step_loop();
    finish();
    out_->flush(std::chrono::hours(24));  // the end: now the output waits for its reader, as any program's does
    err_queue()->flush(std::chrono::hours(24));
    return result_;
  }

 private:
  // ---- executors ------------------------------------------------------------------------------

  void start_executor(Host& h) {
    std::vector<std::string> argv = {opt_.self_exe, "executor", "--host-index", std::to_string(h.spec.index),
                                     "--address", h.spec.address, "--beat-ms",
                                     std::to_string((int)(opt_.heartbeat_s * 1000))};
    if (!opt_.run_dir.empty()) argv.insert(argv.end(), {"--run-dir", opt_.run_dir});
    for (const auto& p : opt_.error_patterns) argv.insert(argv.end(), {"--error-pattern", p});
    for (const auto& p : opt_.warning_patterns) argv.insert(argv.end(), {"--warning-pattern", p});
    argv = launcher_->wrap(h.spec, argv);
    int in[2], out[2], err[2];
    MS_SYSCHECK(::pipe2(in, O_CLOEXEC) == 0 && ::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "pipe2");
    try {
      h.pid = spawn(argv, current_environment(), SpawnOptions{in[0], out[1], err[1], true, true});
      janitor_.watch_group(h.pid);
    } catch (...) {
      for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
      throw;
    }
    ::close(in[0]), ::close(out[1]), ::close(err[1]);
    h.to_fd = in[1], h.from_fd = out[0], h.err_fd = err[0];
    MS_SYSCHECK(::fcntl(h.from_fd, F_SETFL, O_NONBLOCK) == 0 && ::fcntl(h.err_fd, F_SETFL, O_NONBLOCK) == 0, "fcntl");
    h.alive = true;
    h.last_beat = now_;
  }

  // Ends an executor: `exit` on its channel, then SIGKILL to its group if it lingers (or at once).
  void end_executor(Host& h, bool now) {
    if (h.pid <= 0) return;
    if (h.to_fd >= 0) {
      if (!now) send(h, {{"cmd", "exit"}});
      ::close(h.to_fd);
      h.to_fd = -1;
    }
    const auto deadline = Clock::now() + (now ? std::chrono::milliseconds(0) : std::chrono::milliseconds(5000));
    int st = 0;
    for (;;) {
      const pid_t w = ::waitpid(h.pid, &st, WNOHANG);
      if (w == h.pid || (w < 0 && errno != EINTR)) break;
      if (Clock::now() >= deadline) {
        ::kill(-h.pid, SIGKILL);
        ::waitpid(h.pid, &st, 0);
        break;
      }
      ::usleep(10000);
    }
    ::kill(-h.pid, SIGKILL);  // anything left in its group
    h.pid = -1;
    if (h.from_fd >= 0) ::close(h.from_fd), h.from_fd = -1;
    if (h.err_fd >= 0) {  // its last words
      h.err_reader.read_from(h.err_fd);
      for (std::string line; h.err_reader.next(line);) err_queue()->push_line(line);
      ::close(h.err_fd), h.err_fd = -1;
    }
    h.alive = false;
  }

  void send(Host& h, const json& msg) {
    if (h.to_fd < 0) return;
    if (!send_message(h.to_fd, msg)) h.alive = false;
  }

  void wait_for_hellos() {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
      bool all = true;
      for (const Host& h : hosts_) all = all && (h.up || !h.alive);
      if (all) break;
      if (Clock::now() >= deadline) break;
      pump(std::chrono::milliseconds(100));
      if (!signals_seen_.empty()) break;
    }
    for (Host& h : hosts_)
      if (!h.up) {
        exclude(h, h.alive ? "its executor did not start within 30 s" : "its executor could not start");
        end_executor(h, true);
      }
    if (!signals_seen_.empty()) end_job(128 + signals_seen_.front(), fmt::format("driver got signal {}", signals_seen_.front()));
  }

  // ---- the loop -------------------------------------------------------------------------------

  // Waits up to `wait` for reports and handles them. The loop's clock ticks here: ages are judged
  // on it (anomaly.h LoopClock), so time the driver spent stopped or blocked blames no one.
  void pump(std::chrono::milliseconds wait) {
    std::vector<pollfd> pfds{{signals_.fd(), POLLIN, 0}};
    std::vector<Host*> owners;
    for (Host& h : hosts_)
      for (int fd : {h.from_fd, h.err_fd})
        if (fd >= 0) {
          pfds.push_back({fd, POLLIN, 0});
          owners.push_back(&h);
        }
    const int rc = ::poll(pfds.data(), pfds.size(), (int)wait.count());
    MS_SYSCHECK(rc >= 0 || errno == EINTR, "poll");
    now_ = clock_.tick(Clock::now());
    for (int sig : signals_.drain()) signals_seen_.push_back(sig), on_signal(sig);
    if (rc <= 0) return;
    for (size_t i = 1; i < pfds.size(); i++) {
      if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Host& h = *owners[i - 1];
      if (pfds[i].fd == h.err_fd) {  // the executor's stderr (its ranks' stderr lines): dropped when not read
        const bool open = h.err_reader.read_from(h.err_fd);
        for (std::string line; h.err_reader.next(line);) err_queue()->push_line(line);
        if (!open) ::close(h.err_fd), h.err_fd = -1;
        continue;
      }
      if (pfds[i].fd != h.from_fd) continue;
      const bool open = h.reader.read_from(h.from_fd);
      std::string line;
      while (h.reader.next(line)) {
        if (line.empty()) continue;
        try {
          on_message(h, parse_message(line, fmt::format("the executor of host {}", h.spec.index)));
        } catch (const std::exception& e) {
          dlog().warn("{}", e.what());
        }
      }
      if (!open) {
        ::close(h.from_fd);
        h.from_fd = -1;
        h.alive = false;
        if (h.active && phase_ == Phase::kRunning)
          begin_recovery({"executor", fmt::format("the executor of host {} ({}) ended", h.spec.index, h.spec.name), -1,
                          h.spec.index});
      }
    }
  }

  void step_loop() {
    pump(std::chrono::milliseconds(100));
    const auto now = now_;
    if (dash_ && now - published_ > std::chrono::milliseconds(500)) publish_state(now);
    if (now - store_checked_ > std::chrono::seconds(1) && phase_ != Phase::kDone) {
      store_checked_ = now;
      store_ok(false);
    }
    switch (phase_) {
      case Phase::kRunning: watch_running(now); break;
      case Phase::kStopping:
      case Phase::kDraining: watch_stopping(now); break;
      case Phase::kSelfCheck: watch_selfcheck(now); break;
      case Phase::kDone: break;
    }
  }

  void on_signal(int sig) {
    if (phase_ == Phase::kRunning) {
      dlog().warn("got signal {} ({}); the ranks save a checkpoint and stop", sig, signal_description(sig));
      events_->log("stop_requested", {{"signal", sig}});
      stop_signal_ = sig;
      stop_ranks("TERM", opt_.signal_grace);
      stop_started_ = now_;
      phase_ = Phase::kDraining;
    } else if (phase_ == Phase::kDraining) {
      dlog().warn("second signal; killing the ranks");
      stop_ranks("KILL", std::chrono::milliseconds(0));
    } else if (phase_ != Phase::kDone) {
      stop_ranks("KILL", std::chrono::milliseconds(0));
      end_job(128 + sig, fmt::format("driver got signal {} ({}) during recovery", sig, signal_description(sig)));
    }
  }

  void on_message(Host& h, const json& j) {
    const std::string type = j.value("type", "");
    if (type == "hello") {
      h.up = true;
      h.last_beat = now_;
      events_->log("executor_up", {{"host", h.spec.index}, {"name", h.spec.name}, {"pid", j.value("pid", 0)},
                                   {"hostname", j.value("hostname", "")}, {"cores", j.value("cores", 0)}});
    } else if (type == "beat") {
      h.last_beat = now_;
      h.last = j.get<HostBeat>();
      on_beat(h);
    } else if (type == "line") {
      out_->push_line(fmt::format("[rank {}] {}", j.value("rank", -1), j.value("text", "")));
    } else if (type == "selfcheck") {
      h.check = j.get<SelfCheckReport>();
    }
  }

  void on_beat(Host& h) {
    const HostBeat& b = h.last;
    if (!b.error.empty()) dlog().warn("host {}: {}", h.spec.index, b.error);
    if (!b.out_dir.empty() && out_dir_ != b.out_dir) {
      out_dir_ = b.out_dir;
      if (dash_)
        if (const std::string e = write_run_json(folders_->path(), out_dir_, world_); !e.empty()) dlog().warn("{}", e);
    }
    for (const LogLineBeat& l : b.lines) {
      if (l.level == "fault") events_->log("fault_injected", {{"rank", l.rank}, {"host", h.spec.index}, {"text", l.text}});
      if (l.level == "error") last_error_[l.rank] = l.text;
    }
    if (b.attempt != attempt_ || !h.active) return;  // a late beat of an earlier attempt
    const auto now = now_;
    for (const RankBeat& r : b.ranks) {
      if (dash_ && r.pid > 0 && !rank_pid_seen_.count(r.pid)) {
        rank_pid_seen_.insert(r.pid);
        dash_->status().rank_started(r.rank, r.pid);
      }
      if (dash_ && (r.state == "exited" || r.state == "killed") && ranks_ended_.insert(r.rank).second)
        dash_->status().rank_ended(r.rank, r.state == "exited" ? (r.exit_code & 0xff) << 8 : r.signal);
    }
    for (const StepBeat& s : b.steps) {
      if (s.step > job_step_) {
        job_step_ = s.step;
        progress_.progress(now, s.step_ms);
        if (!resumed_logged_ && attempt_ > 0) {
          resumed_logged_ = true;
          json f = {{"attempt", attempt_}, {"step", s.step}, {"from_checkpoint_step", s.step - 1}};
          if (last_fault_) {
            const int repeated = std::max(0, last_fault_->step - (s.step - 1));
            f["recovery_s"] = events_->mono_now() - last_fault_->detected_mono;
            f["steps_repeated"] = repeated;
            steps_repeated_ += repeated;
          }
          events_->log("resumed", f);
          dlog().info("attempt {} resumed: step {} done", attempt_, s.step);
        }
      }
      step_times_.add(s.step, attempt_, s.step_ms);  // its latest execution's time (its slowest rank)
      // Loss spikes (a non-finite loss never reaches a step record: the trainer stops that step and
      // the rank exits, classified as "nan" from its error line).
      if (!std::isfinite(s.loss) || !loss_seen_.insert(s.step).second) continue;
      if (auto why = loss_.add(s.step, s.loss, true)) {
        events_->log("loss_spike", {{"step", s.step}, {"rank", s.rank}, {"reason", *why}});
        dlog().warn("{}", *why);
        if (opt_.loss_spike_action == "restart") {
          begin_recovery({"loss-spike", *why, s.rank, h.spec.index});
          return;
        }
      }
    }
    traffic_.add(now, b.bytes_sent + b.bytes_recv, progress_.started_steps() && world_ > 1);
  }

  // ---- attempts -------------------------------------------------------------------------------

  void start_attempt() {
    // The hosts: the first healthy ones, spares filling in for excluded hosts; without enough, shrink.
    std::vector<int> healthy;
    for (Host& h : hosts_)
      if (!h.excluded && h.alive && h.up) healthy.push_back(h.spec.index);
    if (healthy.empty()) return end_job(1, "no healthy host left");
    if (!store_ok(true)) return;
    const AttemptPlan plan = plan_attempt(healthy, wanted_hosts_);
    const int use = (int)plan.hosts.size();
    if (plan.shrunk && !shrink_logged_) {
      shrink_logged_ = true;
      events_->log("shrink", {{"hosts", use}, {"wanted", wanted_hosts_}, {"world", use * opt_.nproc_per_host}});
      dlog().warn("only {} healthy host(s) of {} needed: data parallelism shrinks to world {}", use, wanted_hosts_,
                  use * opt_.nproc_per_host);
    }
    world_ = use * opt_.nproc_per_host;
    const std::vector<int>& used = plan.hosts;
    for (Host& h : hosts_) h.active = false, h.ranks.clear();
    for (int i = 0; i < use; i++) {
      Host& h = hosts_[(size_t)used[(size_t)i]];
      h.active = true;
      for (int l = 0; l < opt_.nproc_per_host; l++) h.ranks.push_back(i * opt_.nproc_per_host + l);
    }
    first_failure_ = {};
    loss_seen_.clear();
    loss_.reset();
    resumed_logged_ = false;
    job_step_ = 0;
    const auto now = now_;
    progress_.start(now);
    traffic_.start(now);
    events_->log("attempt_start", {{"attempt", attempt_}, {"hosts", used}, {"world", world_}});
    if (dash_ && attempt_ > 0) dash_->restart_records();
    dlog().info("attempt {}: {} rank(s) on host(s) {}", attempt_, world_, fmt::join(used, ", "));
    for (Host& h : hosts_) {
      if (!h.active) continue;
      RunCommand c;
      c.attempt = attempt_;
      c.world = world_;
      c.ranks = h.ranks;
      c.argv = opt_.command;
      c.quiet = opt_.quiet_others;
      c.env = store_->env(fmt::format("job-{}-a{}", tag_, attempt_));
      c.env["MEGASCALE_BACKEND"] = opt_.backend;
      send(h, c);
    }
    phase_ = Phase::kRunning;
  }

  void watch_running(Clock::time_point now) {
    // Ranks' exits: any failure is a fault (its root cause chosen once the failures of the next
    // moments are in: a killed rank's peers fail right after it); all done is the end.
    int ok = 0, ended = 0;
    std::vector<FailedRank> failed;
    std::vector<std::pair<int, double>> ages;
    for (Host& h : hosts_) {
      if (!h.active) continue;
      ages.emplace_back(h.spec.index, secs(now - h.last_beat));
      if (h.last.attempt != attempt_) continue;
      for (const RankBeat& r : h.last.ranks) {
        if (r.state != "exited" && r.state != "killed") continue;
        ended++;
        if (r.state == "exited" && r.exit_code == 0) ok++;
        else failed.push_back({h.spec.index, r});
      }
    }
    if (const Blame b = blame_heartbeats(ages, opt_.heartbeat_timeout_s); b.cause == "shared")
      return begin_recovery({"heartbeat", b.note, -1, -1});
    else if (!b.exclude.empty()) {
      const auto& [host, why] = b.exclude[0];
      return begin_recovery({"heartbeat", fmt::format("{} from host {} ({})", why, host, hosts_[(size_t)host].spec.name),
                             -1, host});
    }
    if (const auto worst = root_cause(failed)) {
      if (first_failure_ == Clock::time_point{}) first_failure_ = now;
      if (now - first_failure_ < std::chrono::milliseconds(500) && ended < world_) return;
      auto e = last_error_.find(worst->rank.rank);
      const FaultRecord f = describe_rank_failure(*worst, e == last_error_.end() ? "" : e->second);
      // Bad input (config, data, checkpoint) stops every rank with an error before the first step:
      // not retried (reliability.md B2, B3).
      const bool startup_error = attempt_ == 0 && job_step_ == 0 && ended == world_ && worst->rank.state == "exited" &&
                                 worst->rank.exit_code != 86;
      begin_recovery(f);
      if (startup_error) startup_error_ = true;
      return;
    }
    if (ok == world_) {
      events_->log("job_end", {{"ok", true}, {"step", job_step_}});
      return end_job(0, "");
    }
    if (auto why = progress_.check(now)) return begin_recovery({"hang", *why, -1, -1});
    if (auto why = traffic_.check(now)) return begin_recovery({"traffic", *why, -1, -1});
  }

  // ---- recovery -------------------------------------------------------------------------------

  void begin_recovery(const FaultRecord& what) {
    if (phase_ != Phase::kRunning) return;
    Fault f;
    static_cast<FaultRecord&>(f) = what;
    f.step = job_step_;
    f.detected_mono = events_->mono_now();
    result_.faults++;
    events_->log("fault_detected", {{"kind", f.kind}, {"reason", f.reason}, {"rank", f.rank}, {"host", f.host},
                                    {"step", f.step}, {"attempt", attempt_}});
    dlog().error("fault: {} (step {}); stopping every rank", f.reason, f.step);
    faults_.push_back(f);
    last_fault_ = f;
    if ((f.kind == "heartbeat" || f.kind == "executor") && f.host >= 0) {
      Host& h = hosts_[(size_t)f.host];
      end_executor(h, true);
      exclude(h, f.reason);
    }
    stop_ranks("USR1", opt_.stop_grace);
    stop_started_ = now_;
    phase_ = Phase::kStopping;
  }

  void stop_ranks(const char* sig, std::chrono::milliseconds grace) {
    for (Host& h : hosts_)
      if (h.active && h.alive) send(h, {{"cmd", "stop"}, {"signal", sig}, {"grace_ms", grace.count()}});
  }

  bool all_stopped() const {
    for (const Host& h : hosts_)
      if (h.active && h.alive && h.last.attempt == attempt_ && h.last.state != "stopped") return false;
    return true;
  }

  void watch_stopping(Clock::time_point now) {
    const auto grace = phase_ == Phase::kDraining ? opt_.signal_grace : opt_.stop_grace;
    const bool late = now - stop_started_ > grace + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(opt_.heartbeat_timeout_s));
    for (Host& h : hosts_)  // an executor that stops answering while stopping
      if (h.active && h.alive && now - h.last_beat > std::chrono::duration<double>(opt_.heartbeat_timeout_s)) {
        end_executor(h, true);
        exclude(h, fmt::format("no heartbeat for {:.1f} s while its ranks were stopped", secs(now - h.last_beat)));
      }
    if (!all_stopped() && !late) return;
    if (phase_ == Phase::kDraining) {
      bool all_zero = true;
      for (const Host& h : hosts_)
        if (h.active)
          for (const RankBeat& r : h.last.ranks) all_zero = all_zero && r.state == "exited" && r.exit_code == 0;
      events_->log("job_end", {{"ok", all_zero}, {"step", job_step_}, {"signal", stop_signal_}});
      if (all_zero) dlog().info("stopped by signal {}; every rank saved and exited 0", stop_signal_);
      return end_job(all_zero ? 0 : 128 + stop_signal_,
                     all_zero ? "" : fmt::format("driver got signal {}; not every rank exited 0", stop_signal_));
    }
    // The ranks' last records are in now (the survivors flush theirs on the way out): the step the
    // job had reached when the fault came.
    faults_.back().step = std::max(faults_.back().step, job_step_);
    last_fault_ = faults_.back();
    events_->log("ranks_stopped", {{"seconds", secs(now - stop_started_)}, {"all", !late}, {"step", job_step_}});
    if (last_fault_ && (last_fault_->kind == "hang" || last_fault_->kind == "traffic")) localize_hang();
    // Repeats and limits before spending time on checks (recovery_policy.h RetryPolicy).
    if (auto why = retry_.after_fault(faults_.back(), result_.restarts, startup_error_)) return end_job(1, *why);
    if (opt_.selfcheck) return start_selfchecks();
    restart();
  }

  // After a hang: the ranks dumped where they wait (SIGUSR1); diagnose names the culprits, and the
  // policy blames their hosts, storage (a culprit in a checkpoint segment) or a shared cause.
  void localize_hang() {
    if (out_dir_.empty() || !fs::exists(fs::path(out_dir_) / "hang")) return;
    try {
      const Diagnosis d = diagnose_run(out_dir_);
      json culprits = json::array();
      std::vector<HangCulprit> hc;
      std::vector<int> active;
      for (const Host& h : hosts_)
        if (h.active) active.push_back(h.spec.index);
      for (const Culprit& c : d.culprits) {
        HangCulprit x{c.rank, -1, c.why, dump_segment(out_dir_, c.rank)};
        for (const Host& h : hosts_)
          if (h.active && std::find(h.ranks.begin(), h.ranks.end(), c.rank) != h.ranks.end()) x.host = h.spec.index;
        culprits.push_back({{"rank", c.rank}, {"host", x.host}, {"why", c.why}, {"segment", x.segment}});
        hc.push_back(x);
      }
      const Blame b = blame_hang(hc, active);
      for (const auto& [host, why] : b.exclude) exclude(hosts_[(size_t)host], why);
      if (b.cause == "storage" || b.cause == "shared") faults_.back().kind = b.cause, last_fault_ = faults_.back();
      if (!b.note.empty()) dlog().warn("{}", b.note);
      events_->log("hang_diagnosis",
                   {{"culprits", culprits}, {"notes", d.notes}, {"cause", b.cause}, {"note", b.note}});
    } catch (const std::exception& e) {
      events_->log("hang_diagnosis", {{"error", e.what()}});
    }
  }

  // Evicts a host: logged, and its executor told to exit (its ranks are stopped already).
  void exclude(Host& h, const std::string& why) {
    if (h.excluded) return;
    h.excluded = true;
    h.excluded_why = why;
    events_->log("host_excluded", {{"host", h.spec.index}, {"name", h.spec.name}, {"reason", why}});
    dlog().warn("host {} ({}) excluded: {}", h.spec.index, h.spec.name, why);
    if (h.alive && phase_ != Phase::kRunning) end_executor(h, false);
  }

  // ---- self-checks ----------------------------------------------------------------------------

  void start_selfchecks() {
    if (!store_ok(true)) return;  // the checks rendezvous through the store too
    check_hosts_.clear();
    for (Host& h : hosts_)
      if (!h.excluded && h.alive && h.up) check_hosts_.push_back(h.spec.index);
    checks_.clear();
    for (int i : check_hosts_) checks_[i].host = i;
    pair_rounds_ = neighbour_rounds(check_hosts_);
    check_round_ = -1;
    phase_ = Phase::kSelfCheck;
    check_started_ = now_;
    next_check_round();
  }

  // Round -1: every host on its own; rounds 0..: neighbour pairs.
  void next_check_round() {
    check_round_++;
    for (Host& h : hosts_) h.check.reset();
    round_hosts_.clear();
    const int id = ++check_id_, n = opt_.nproc_per_host;
    const SelfCheckSetup setup{opt_.self_exe, opt_.backend, opt_.selfcheck_timeout_s};
    if (check_round_ == 0) {
      for (int i : check_hosts_) {
        const auto env = store_->env(fmt::format("selfcheck-{}-{}-host{}", tag_, id, i));
        send(hosts_[(size_t)i], selfcheck_command(setup, id, env, 0, n, n, true));
        round_hosts_.push_back(i);
      }
    } else {
      const size_t k = (size_t)check_round_ - 1;
      if (k >= pair_rounds_.size()) return judge_checks();
      for (const auto& [a, b] : pair_rounds_[k]) {
        const auto env = store_->env(fmt::format("selfcheck-{}-{}-pair{}-{}", tag_, id, a, b));
        for (int r = 0; r < 2; r++) {
          send(hosts_[(size_t)(r == 0 ? a : b)], selfcheck_command(setup, id, env, r, 1, 2, false));
          round_hosts_.push_back(r == 0 ? a : b);
        }
      }
    }
    round_started_ = now_;
  }

  void watch_selfcheck(Clock::time_point now) {
    bool all = true;
    for (int i : round_hosts_) {
      const Host& h = hosts_[(size_t)i];
      all = all && (h.check.has_value() || !h.alive);
    }
    const bool late = now - round_started_ > std::chrono::duration<double>(opt_.selfcheck_timeout_s + opt_.heartbeat_timeout_s);
    if (!all && !late) return;
    if (check_round_ == 0) {
      for (int i : round_hosts_) {
        HostCheck& c = checks_[i];
        const Host& h = hosts_[(size_t)i];
        if (h.check) add_host_results(c, h.check->results);
      }
      for (int i : round_hosts_) {
        const HostCheck& c = checks_[i];
        events_->log("selfcheck", {{"host", i}, {"check", "host"}, {"ran", c.ran}, {"gemm_ok", c.gemm_ok},
                                   {"gemm_gflops", c.gemm_gflops}, {"allreduce_ok", c.allreduce_ok},
                                   {"allreduce_gbps", c.allreduce_gbps}, {"detail", c.detail}});
      }
    } else {
      // Pair results: a pair passes when both of its processes passed.
      const size_t k = (size_t)check_round_ - 1;
      for (const auto& [a, b] : pair_rounds_[k]) {
        bool ok = true;
        for (int hi : {a, b}) {
          const Host& h = hosts_[(size_t)hi];
          ok = ok && h.check && !h.check->results.empty() && result_passed_allreduce(h.check->results[0]);
        }
        checks_[a].pairs.emplace_back(b, ok);
        checks_[b].pairs.emplace_back(a, ok);
        events_->log("selfcheck", {{"host", a}, {"check", "pair"}, {"partner", b}, {"allreduce_ok", ok}});
      }
    }
    next_check_round();
  }

  void judge_checks() {
    std::vector<HostCheck> all;
    for (int i : check_hosts_) all.push_back(checks_[i]);
    const std::vector<HostVerdict> verdicts = judge_selfchecks(all, opt_.selfcheck_gemm_margin);
    for (const HostVerdict& v : verdicts)
      events_->log("selfcheck_verdict", {{"host", v.host}, {"ok", v.ok}, {"why", v.why}, {"kind", v.kind}});
    const Blame b = blame_selfchecks(verdicts);
    for (const auto& [host, why] : b.exclude) exclude(hosts_[(size_t)host], why);
    if (!b.note.empty()) dlog().warn("{}", b.note);
    events_->log("selfcheck_done", {{"seconds", secs(now_ - check_started_)}, {"cause", b.cause}, {"note", b.note}});
    restart();
  }

  void restart() {
    archive_hang_dumps(out_dir_, attempt_);
    result_.restarts++;
    attempt_++;
    events_->log("restart", {{"attempt", attempt_}, {"after", faults_.back().reason}});
    start_attempt();
  }

  // The dashboard's view of the driver (job_status.h set_driver).
  void publish_state(Clock::time_point now) {
    published_ = now;
    json hosts = json::array();
    for (const Host& h : hosts_)
      hosts.push_back({{"index", h.spec.index}, {"name", h.spec.name},
                       {"state", h.excluded ? "excluded" : h.active ? "active" : "spare"},
                       {"reason", h.excluded_why}, {"executor_alive", h.alive}});
    json events = events_->all();
    if (events.size() > 20) events = json(std::vector<json>(events.end() - 20, events.end()));
    static const char* phases[] = {"running", "stopping", "self-check", "draining", "done"};
    dash_->status().set_driver({{"attempt", attempt_}, {"faults", result_.faults}, {"restarts", result_.restarts},
                                {"phase", phases[(int)phase_]}, {"world", world_}, {"hosts", hosts},
                                {"events", events}, {"log", events_->path()}});
  }

  // ---- the end --------------------------------------------------------------------------------

  // The rendezvous store works (a dead redis-server of ours is started again: logged); else the job
  // ends with "rendezvous store unreachable: ..." and false.
  bool store_ok(bool ping) {
    try {
      const std::string what = store_->heal(ping);
      if (!what.empty()) {
        events_->log("store_restarted", {{"reason", what}});
        dlog().warn("rendezvous store: {}", what);
      }
      return true;
    } catch (const std::exception& e) {
      if (phase_ != Phase::kDone) stop_ranks("KILL", std::chrono::milliseconds(0));
      end_job(1, e.what());
      return false;
    }
  }

  void end_job(int code, const std::string& reason) {
    result_.exit_code = code;
    result_.reason = reason;
    if (!reason.empty()) {
      dlog().error("job failed: {}", reason);
      events_->log("job_end", {{"ok", false}, {"reason", reason}, {"step", job_step_}});
    }
    phase_ = Phase::kDone;
  }

  void finish() {
    if (dash_) publish_state(Clock::now());
    for (Host& h : hosts_)
      if (h.alive) send(h, {{"cmd", "exit"}});
    for (Host& h : hosts_) end_executor(h, false);
    JobSummary sum;
    sum.exit_code = result_.exit_code, sum.reason = result_.reason;
    for (const Fault& f : faults_) sum.faults.push_back(f);
    sum.restarts = result_.restarts, sum.steps_repeated = steps_repeated_;
    for (const Host& h : hosts_)
      if (h.excluded) sum.excluded.push_back({h.spec.index, h.spec.name, h.excluded_why});
    sum.final_step = job_step_, sum.final_world = world_;
    sum.wall_s = secs(Clock::now() - start_), sum.productive_s = step_times_.productive_s();
    result_.ettr = sum.ettr();
    const json summary = sum.to_json();
    events_->log("summary", summary);
    try {
      write_text_atomic((fs::path(log_dir_) / "summary.json").string(), summary.dump(2) + "\n");
    } catch (const std::exception& e) {
      dlog().warn("{}", e.what());
    }
    for (const std::string& line : sum.lines()) dlog().info("{}", line);
    dlog().info("events in {}", events_->path());
  }

  DriverOptions opt_;
  Janitor janitor_;  // ends the executors' groups, the store server and removes the folders if the driver dies
  std::unique_ptr<HostLauncher> launcher_;
  std::vector<Host> hosts_;
  int wanted_hosts_ = 1;
  std::string tag_, log_dir_, out_dir_;
  SignalPipe signals_;
  std::vector<int> signals_seen_;
  // Rank stdout lines, dropped when nobody reads (the loop never blocks on its output).
  std::unique_ptr<OutputQueue> out_ = std::make_unique<OutputQueue>(1, 1 << 20, "megascale launch: ");
  LoopClock clock_{std::chrono::seconds(1)};
  Clock::time_point now_{}, store_checked_{};  // the loop's time (clock_) at its last wake-up
  std::unique_ptr<PrivateDir> folders_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<EventLog> events_;
  std::unique_ptr<Dashboard> dash_;
  Phase phase_ = Phase::kRunning;
  Clock::time_point start_{}, stop_started_{}, check_started_{}, round_started_{}, published_{};
  int attempt_ = 0, world_ = 0, job_step_ = 0, stop_signal_ = 0, steps_repeated_ = 0;
  bool resumed_logged_ = false, shrink_logged_ = false, startup_error_ = false;
  Clock::time_point first_failure_{};  // the attempt's first failed rank seen
  ProgressWatch progress_;
  TrafficWatch traffic_;
  LossWatch loss_;
  RetryPolicy retry_;
  std::set<int> ranks_ended_;  // reported ended to the dashboard (its rank numbers: the current world)
  std::set<int64_t> rank_pid_seen_;
  std::set<int> loss_seen_;
  std::map<int, std::string> last_error_;
  StepTimes step_times_;
  std::vector<Fault> faults_;
  std::optional<Fault> last_fault_;
  // self-checks
  std::vector<int> check_hosts_, round_hosts_;
  std::map<int, HostCheck> checks_;
  std::vector<std::vector<std::pair<int, int>>> pair_rounds_;
  int check_round_ = -1, check_id_ = 0;
  DriverResult result_;
};

}  // namespace

DriverResult run_driver(const DriverOptions& opt) {
  Driver d(opt);
  return d.run();
}

}  // namespace ms::launch
