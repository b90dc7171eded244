// driver: see driver.h. One event loop polls every executor's stdout (reports) and the signal
// self-pipe; the job moves through phases: running an attempt -> stopping its ranks -> self-checks
// -> the next attempt (or the end).
#include "launch/driver.h"

#include <poll.h>       // poll
#include <unistd.h>     // getpid

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
#include "launch/executor_channel.h"
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
#include "report/recovery_report.h"  // restore_summary

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
  ExecutorChannel exec;    // its executor
  bool up = false;         // said hello
  std::vector<int> ranks;  // world ranks in the current attempt (when the policy has it active)
  Clock::time_point last_beat{};
  HostBeat last;           // the last heartbeat
  std::optional<SelfCheckReport> check;  // the current self-check round's report
  std::string mem_dir;     // its memory folder (in-memory checkpoints), from its hello
};

enum class Phase { kRunning, kStopping, kSelfCheck, kDraining, kDone };

class Driver {
 public:
  explicit Driver(const DriverOptions& opt) : opt_(opt), janitor_(opt.tools.janitor), progress_(opt.stall), traffic_(opt.traffic_timeout_s),
                                              loss_(opt.loss_window, opt.loss_z) {
    MS_CHECK(opt.nproc_per_host >= 1 && opt.nproc_per_host <= 1024, "--nproc-per-host must be in 1..1024");
    MS_CHECK(!opt.command.empty(), "no command to launch");
    MS_CHECK(!opt.tools.executor.empty() && !opt.tools.selfcheck.empty(),
             "DriverOptions.tools: the application must say how to start an executor and a self-check");
    launcher_ = make_host_launcher(opt.host_launcher);
    PolicyOptions po{{}, opt.spare_hosts, opt.same_failure_limit, opt.max_restarts, opt.selfcheck, opt.loss_spike_action};
    for (const HostSpec& s : parse_hosts(opt.hosts)) {
      hosts_.emplace_back();
      hosts_.back().spec = s;
      po.host_names.push_back(s.name);
    }
    MS_CHECK(opt.spare_hosts >= 0 && opt.spare_hosts < (int)hosts_.size(),
             "--spare-hosts {} leaves no host to run on ({} host(s))", opt.spare_hosts, hosts_.size());
    policy_ = std::make_unique<RecoveryPolicy>(std::move(po));
    tag_ = fmt::format("{}-{}", ::getpid(), (int64_t)(unix_seconds() * 1000));
    bool all_local = true;
    for (const Host& h : hosts_) all_local = all_local && h.spec.local;
    const StoreSpec store = resolve_store(opt.store, all_local);
    folders_ = std::make_unique<PrivateDir>(opt.run_dir, "launch-" + tag_, "launch", janitor_);
    MS_CHECK(all_local || store.kind != StoreKind::kFile,
             "--store file needs every host on this machine; use redis or redis://host:port");
    MS_CHECK(all_local || store.kind != StoreKind::kRedis, "--store redis starts a server on loopback, which other hosts cannot reach; "
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
      d.world = policy_->wanted_hosts() * opt.nproc_per_host;
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
    std::vector<std::string> argv = opt_.tools.executor;
    argv.insert(argv.end(), {"--host-index", std::to_string(h.spec.index), "--address", h.spec.address, "--beat-ms",
                             std::to_string((int)(opt_.heartbeat_s * 1000))});
    if (!opt_.run_dir.empty()) argv.insert(argv.end(), {"--run-dir", opt_.run_dir});
    for (const auto& p : opt_.error_patterns) argv.insert(argv.end(), {"--error-pattern", p});
    for (const auto& p : opt_.warning_patterns) argv.insert(argv.end(), {"--warning-pattern", p});
    h.exec.start(launcher_->wrap(h.spec, argv), janitor_);
    h.last_beat = now_;
  }

  // Ends an executor: `exit` on its channel, then SIGKILL to its group if it lingers (or at once).
  void end_executor(Host& h, bool now) { h.exec.end(now, *err_queue()); }

  void wait_for_hellos() {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    for (;;) {
      bool all = true;
      for (const Host& h : hosts_) all = all && (h.up || !h.exec.alive());
      if (all || Clock::now() >= deadline) break;
      pump(std::chrono::milliseconds(100));
      if (!signals_seen_.empty()) break;
    }
    for (Host& h : hosts_)  // an exclusion the driver sees itself: the policy records it
      if (!h.up) {
        const std::string why = h.exec.alive() ? "its executor did not start within 30 s" : "its executor could not start";
        if (policy_->exclude(h.spec.index, why)) announce_exclusion(h, why);
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
      for (int fd : h.exec.read_fds()) {
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
      std::vector<std::string> reports;
      const bool gone = h.exec.read(pfds[i].fd, *err_queue(), reports);
      for (const std::string& line : reports) {
        if (line.empty()) continue;
        try {
          on_message(h, parse_message(line, fmt::format("the executor of host {}", h.spec.index)));
        } catch (const std::exception& e) {
          dlog().warn("{}", e.what());
        }
      }
      if (gone && active(h) && phase_ == Phase::kRunning)
        begin_recovery({"executor", fmt::format("the executor of host {} ({}) ended", h.spec.index, h.spec.name), -1,
                        h.spec.index});
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
      h.mem_dir = j.value("mem_dir", "");
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
    const int attempt = policy_->attempt();
    if (b.attempt != attempt || !active(h)) return;  // a late beat of an earlier attempt
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
        if (!resumed_logged_ && attempt > 0) {
          resumed_logged_ = true;
          json f = {{"attempt", attempt}, {"step", s.step}, {"from_checkpoint_step", s.step - 1},
                    {"warm_ranks", warm_ranks()}};
          if (!policy_->faults().empty()) {
            const int repeated = std::max(0, policy_->faults().back().step - (s.step - 1));
            f["recovery_s"] = events_->mono_now() - fault_mono_.back();
            f["steps_repeated"] = repeated;
            steps_repeated_ += repeated;
          }
          events_->log("resumed", f);
          dlog().info("attempt {} resumed: step {} done", attempt, s.step);
          // Which path restored the state and what it cost (the ranks' restore_rank<R>.json of this attempt).
          if (!out_dir_.empty()) {
            json r = restore_summary(out_dir_, world_, attempt_started_t_);
            r["attempt"] = attempt;
            events_->log("recovery", r);
            // The last recovery as the dashboard shows it: where the state came from, what it cost.
            last_recovery_ = {{"attempt", attempt}, {"path", r.value("path", "")},
                              {"memory_local", r.value("memory_local", 0)}, {"memory_peer", r.value("memory_peer", 0)},
                              {"storage", r.value("storage", 0)}, {"restore_s", r.value("restore_s", 0.0)},
                              {"memory_skipped", r.value("memory_skipped", "")}, {"resumed_step", s.step},
                              {"recovery_s", f.value("recovery_s", 0.0)}, {"steps_repeated", f.value("steps_repeated", 0)},
                              {"warm_ranks", f.value("warm_ranks", 0)}, {"world", world_}};
            dlog().info("attempt {} restored from {} in {:.2f} s (slowest rank)", attempt, r.value("path", "?"),
                        r.value("restore_s", 0.0));
          }
        }
      }
      step_times_.add(s.step, attempt, s.step_ms);  // its latest execution's time (its slowest rank)
      // Loss spikes (a non-finite loss never reaches a step record: the trainer stops that step and
      // the rank exits, classified as "nan" from its error line).
      if (!std::isfinite(s.loss) || !loss_seen_.insert(s.step).second) continue;
      if (auto why = loss_.add(s.step, s.loss, true)) {
        events_->log("loss_spike", {{"step", s.step}, {"rank", s.rank}, {"reason", *why}});
        dlog().warn("{}", *why);
        if (const auto fault = policy_->loss_spike(*why, s.rank, h.spec.index)) return begin_recovery(*fault);
      }
    }
    traffic_.add(now, b.bytes_sent + b.bytes_recv, progress_.started_steps() && world_ > 1);
  }

  // ---- attempts -------------------------------------------------------------------------------

  void start_attempt() {
    // The hosts (recovery_policy.h): the first healthy ones, spares filling in; without enough, shrink.
    std::vector<int> available;
    for (const Host& h : hosts_)
      if (h.exec.alive() && h.up) available.push_back(h.spec.index);
    const AttemptDecision plan = policy_->next_attempt(available);
    if (plan.end) return end_job(1, plan.reason);
    if (!store_ok(true)) return;
    const int use = (int)plan.hosts.size(), wanted = policy_->wanted_hosts(), attempt = policy_->attempt();
    if (plan.first_shrink) {
      events_->log("shrink", {{"hosts", use}, {"wanted", wanted}, {"world", use * opt_.nproc_per_host}});
      dlog().warn("only {} healthy host(s) of {} needed: data parallelism shrinks to world {}", use, wanted,
                  use * opt_.nproc_per_host);
    }
    world_ = use * opt_.nproc_per_host;
    const std::vector<int>& used = plan.hosts;
    for (Host& h : hosts_) h.ranks.clear();
    for (int i = 0; i < use; i++)
      for (int l = 0; l < opt_.nproc_per_host; l++)
        hosts_[(size_t)used[(size_t)i]].ranks.push_back(i * opt_.nproc_per_host + l);
    loss_seen_.clear();
    loss_.reset();
    resumed_logged_ = false;
    job_step_ = 0;
    const auto now = now_;
    progress_.start(now);
    traffic_.start(now);
    attempt_started_t_ = events_->log("attempt_start", {{"attempt", attempt}, {"hosts", used}, {"world", world_}})
                             .value("t", 0.0) - 1.0;  // the ranks' restore files of this attempt are newer
    if (dash_ && attempt > 0) dash_->restart_records();
    dlog().info("attempt {}: {} rank(s) on host(s) {}", attempt, world_, fmt::join(used, ", "));
    for (Host& h : hosts_) {
      if (!active(h)) continue;
      RunCommand c;
      c.attempt = attempt;
      c.world = world_;
      c.ranks = h.ranks;
      c.argv = opt_.command;
      c.quiet = opt_.quiet_others;
      c.env = store_->env(fmt::format("job-{}-a{}", tag_, attempt));
      c.env["MEGASCALE_BACKEND"] = opt_.backend;
      h.exec.send(c);
    }
    // Warm processes of the command wait on every host, spares too (standby.h): the next attempt's
    // ranks start from them (an executor starts them once its ranks completed a step).
    if (opt_.standby)
      for (Host& h : hosts_)
        if (h.exec.alive() && !policy_->excluded(h.spec.index)) h.exec.send(StandbyCommand{opt_.command, opt_.nproc_per_host});
    phase_ = Phase::kRunning;
  }

  // Gathers what the running attempt shows (heartbeat ages, ranks' exits, the watches' verdicts);
  // the policy says whether it is a fault, the end, or nothing yet.
  void watch_running(Clock::time_point now) {
    RunningView v;
    v.now_s = secs(now.time_since_epoch());
    v.last_error = &last_error_;
    v.world = world_, v.job_step = job_step_;
    for (Host& h : hosts_) {
      if (!active(h)) continue;
      v.beat_ages.emplace_back(h.spec.index, secs(now - h.last_beat));
      if (h.last.attempt != policy_->attempt()) continue;
      for (const RankBeat& r : h.last.ranks) {
        if (r.state != "exited" && r.state != "killed") continue;
        v.ended++;
        if (r.state == "exited" && r.exit_code == 0) v.ok++;
        else v.failed.push_back({h.spec.index, r});
      }
    }
    v.stalled = progress_.check(now);
    v.quiet = traffic_.check(now);
    const RunningVerdict r = policy_->judge_running(v, opt_.heartbeat_timeout_s);
    if (r.next == RunningVerdict::Next::kFault) return begin_recovery(r.fault);
    if (r.next == RunningVerdict::Next::kDone) {
      events_->log("job_end", {{"ok", true}, {"step", job_step_}});
      end_job(0, "");
    }
  }

  // ---- recovery -------------------------------------------------------------------------------

  void begin_recovery(const FaultRecord& what) {
    if (phase_ != Phase::kRunning) return;
    const std::vector<Exclusion> now_out = policy_->on_fault(what, job_step_);
    const FaultRecord& f = policy_->faults().back();
    fault_mono_.push_back(events_->mono_now());
    result_.faults++;
    events_->log("fault_detected", {{"kind", f.kind}, {"reason", f.reason}, {"rank", f.rank}, {"host", f.host},
                                    {"step", f.step}, {"attempt", policy_->attempt()}});
    dlog().error("fault: {} (step {}); stopping every rank", f.reason, f.step);
    for (const Exclusion& e : now_out) {  // a silent or ended executor
      end_executor(hosts_[(size_t)e.host], true);
      announce_exclusion(hosts_[(size_t)e.host], e.reason);
    }
    if (policy_->wants_hang_dumps()) stop_ranks("USR1", opt_.stop_grace);
    else stop_ranks("KILL", std::chrono::milliseconds(0));
    stop_started_ = now_;
    phase_ = Phase::kStopping;
  }

  void stop_ranks(const char* sig, std::chrono::milliseconds grace) {
    for (Host& h : hosts_)
      if (active(h) && h.exec.alive()) h.exec.send({{"cmd", "stop"}, {"signal", sig}, {"grace_ms", grace.count()}});
  }

  bool all_stopped() const {
    for (const Host& h : hosts_)
      if (active(h) && h.exec.alive() && h.last.attempt == policy_->attempt() && h.last.state != "stopped") return false;
    return true;
  }

  void watch_stopping(Clock::time_point now) {
    const auto grace = phase_ == Phase::kDraining ? opt_.signal_grace : opt_.stop_grace;
    const bool late = now - stop_started_ > grace + std::chrono::duration_cast<Clock::duration>(
                                                          std::chrono::duration<double>(opt_.heartbeat_timeout_s));
    std::vector<std::pair<int, double>> ages;  // an executor that stops answering while stopping
    for (const Host& h : hosts_)
      if (active(h) && h.exec.alive()) ages.emplace_back(h.spec.index, secs(now - h.last_beat));
    for (const Exclusion& e : policy_->silent_while_stopping(ages, opt_.heartbeat_timeout_s)) {
      end_executor(hosts_[(size_t)e.host], true);
      announce_exclusion(hosts_[(size_t)e.host], e.reason);
    }
    if (!all_stopped() && !late) return;
    if (phase_ == Phase::kDraining) {
      bool all_zero = true;
      for (const Host& h : hosts_)
        if (active(h))
          for (const RankBeat& r : h.last.ranks) all_zero = all_zero && r.state == "exited" && r.exit_code == 0;
      events_->log("job_end", {{"ok", all_zero}, {"step", job_step_}, {"signal", stop_signal_}});
      if (all_zero) dlog().info("stopped by signal {}; every rank saved and exited 0", stop_signal_);
      return end_job(all_zero ? 0 : 128 + stop_signal_,
                     all_zero ? "" : fmt::format("driver got signal {}; not every rank exited 0", stop_signal_));
    }
    // The ranks' last records are in now: the step the job had reached when the fault came.
    const bool hang = policy_->ranks_stopped(job_step_);
    events_->log("ranks_stopped", {{"seconds", secs(now - stop_started_)}, {"all", !late}, {"step", job_step_}});
    if (hang) localize_hang();
    const StopDecision next = policy_->after_stop();  // the retry limits, then self-checks or a restart
    if (next.next == StopDecision::Next::kEnd) return end_job(1, next.reason);
    if (next.next == StopDecision::Next::kSelfCheck) return start_selfchecks();
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
      for (const Culprit& c : d.culprits) {
        HangCulprit x{c.rank, -1, c.why, dump_segment(out_dir_, c.rank)};
        for (const Host& h : hosts_)
          if (active(h) && std::find(h.ranks.begin(), h.ranks.end(), c.rank) != h.ranks.end()) x.host = h.spec.index;
        culprits.push_back({{"rank", c.rank}, {"host", x.host}, {"why", c.why}, {"segment", x.segment}});
        hc.push_back(x);
      }
      const Blame b = policy_->hang_diagnosed(hc);  // a storage or shared cause becomes the fault's kind
      for (const auto& [host, why] : b.exclude) announce_exclusion(hosts_[(size_t)host], why);
      if (!b.note.empty()) dlog().warn("{}", b.note);
      events_->log("hang_diagnosis",
                   {{"culprits", culprits}, {"notes", d.notes}, {"cause", b.cause}, {"note", b.note}});
    } catch (const std::exception& e) {
      events_->log("hang_diagnosis", {{"error", e.what()}});
    }
  }

  bool active(const Host& h) const { return policy_->active(h.spec.index); }

  // The running attempt's ranks that started from a standby process (the executors' last beats).
  int warm_ranks() const {
    int n = 0;
    for (const Host& h : hosts_)
      if (active(h) && h.last.attempt == policy_->attempt())
        for (const RankBeat& r : h.last.ranks) n += r.warm;
    return n;
  }

  // Carries out an exclusion the policy made: logged, and its executor told to exit (its ranks are
  // stopped already). A dead executor's memory folder, where it is on this machine (local and
  // emulated hosts), goes now, as a lost machine's memory would: hosts emulated on one machine
  // would otherwise hold a lost host's snapshots beside the spare's until the job ends.
  void announce_exclusion(Host& h, const std::string& why) {
    events_->log("host_excluded", {{"host", h.spec.index}, {"name", h.spec.name}, {"reason", why}});
    dlog().warn("host {} ({}) excluded: {}", h.spec.index, h.spec.name, why);
    if (h.exec.alive() && phase_ != Phase::kRunning) end_executor(h, false);
    if (!h.exec.alive()) remove_local_mem_dir(h);
  }

  static void remove_local_mem_dir(const Host& h) {
    std::error_code ec;
    if (!h.mem_dir.empty() && fs::path(h.mem_dir).filename().string().starts_with("megascale-mem-"))
      fs::remove_all(h.mem_dir, ec);
  }

  // ---- self-checks ----------------------------------------------------------------------------

  void start_selfchecks() {
    if (!store_ok(true)) return;  // the checks rendezvous through the store too
    check_hosts_.clear();
    for (Host& h : hosts_)
      if (!policy_->excluded(h.spec.index) && h.exec.alive() && h.up) check_hosts_.push_back(h.spec.index);
    checks_.clear();
    for (int i : check_hosts_) checks_[i].host = i;
    pair_rounds_ = neighbour_rounds(check_hosts_);
    check_round_ = -1;
    phase_ = Phase::kSelfCheck;
    check_started_ = now_;
    next_check_round();
  }

  // Round 0: every host on its own; rounds 1..: neighbour pairs.
  void next_check_round() {
    check_round_++;
    for (Host& h : hosts_) h.check.reset();
    round_hosts_.clear();
    const int id = ++check_id_, n = opt_.nproc_per_host;
    const SelfCheckSetup setup{opt_.tools.selfcheck, opt_.backend, opt_.selfcheck_timeout_s};
    if (check_round_ == 0) {
      for (int i : check_hosts_) {
        const auto env = store_->env(fmt::format("selfcheck-{}-{}-host{}", tag_, id, i));
        hosts_[(size_t)i].exec.send(selfcheck_command(setup, id, env, 0, n, n, true));
        round_hosts_.push_back(i);
      }
    } else {
      const size_t k = (size_t)check_round_ - 1;
      if (k >= pair_rounds_.size()) return judge_checks();
      for (const auto& [a, b] : pair_rounds_[k]) {
        const auto env = store_->env(fmt::format("selfcheck-{}-{}-pair{}-{}", tag_, id, a, b));
        for (int r = 0; r < 2; r++) {
          hosts_[(size_t)(r == 0 ? a : b)].exec.send(selfcheck_command(setup, id, env, r, 1, 2, false));
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
      all = all && (h.check.has_value() || !h.exec.alive());
    }
    const bool late = now - round_started_ > std::chrono::duration<double>(opt_.selfcheck_timeout_s + opt_.heartbeat_timeout_s);
    if (!all && !late) return;
    if (check_round_ == 0) {
      for (int i : round_hosts_) {
        HostCheck& c = checks_[i];
        if (const Host& h = hosts_[(size_t)i]; h.check) add_host_results(c, h.check->results);
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
    const Blame b = policy_->selfchecks_judged(verdicts);
    for (const auto& [host, why] : b.exclude) announce_exclusion(hosts_[(size_t)host], why);
    if (!b.note.empty()) dlog().warn("{}", b.note);
    events_->log("selfcheck_done", {{"seconds", secs(now_ - check_started_)}, {"cause", b.cause}, {"note", b.note}});
    restart();
  }

  void restart() {
    archive_hang_dumps(out_dir_, policy_->attempt());
    policy_->restart();
    result_.restarts = policy_->restarts();
    events_->log("restart", {{"attempt", policy_->attempt()}, {"after", policy_->faults().back().reason}});
    start_attempt();
  }

  // The dashboard's view of the driver (job_status.h set_driver).
  void publish_state(Clock::time_point now) {
    published_ = now;
    json hosts = json::array();
    for (const Host& h : hosts_)
      hosts.push_back({{"index", h.spec.index}, {"name", h.spec.name},
                       {"state", policy_->excluded(h.spec.index) ? "excluded" : active(h) ? "active" : "spare"},
                       {"reason", policy_->excluded_reason(h.spec.index)}, {"executor_alive", h.exec.alive()}});
    json events = events_->all();
    if (events.size() > 20) events = json(std::vector<json>(events.end() - 20, events.end()));
    static const char* phases[] = {"running", "stopping", "self-check", "draining", "done"};
    dash_->status().set_driver({{"attempt", policy_->attempt()}, {"faults", result_.faults}, {"restarts", result_.restarts},
                                {"phase", phases[(int)phase_]}, {"world", world_}, {"hosts", hosts},
                                {"events", events}, {"log", events_->path()}, {"last_recovery", last_recovery_}});
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
      if (h.exec.alive()) h.exec.send({{"cmd", "exit"}});
    for (Host& h : hosts_) end_executor(h, false);
    // An executor that died (a lost host) could not remove its memory folder: where it is on this
    // machine (local and emulated hosts), it goes now; a remote one went with its host.
    for (const Host& h : hosts_) remove_local_mem_dir(h);
    JobSummary sum;
    sum.exit_code = result_.exit_code, sum.reason = result_.reason;
    sum.faults = policy_->faults();
    sum.restarts = result_.restarts, sum.steps_repeated = steps_repeated_;
    for (const Host& h : hosts_)
      if (policy_->excluded(h.spec.index))
        sum.excluded.push_back({h.spec.index, h.spec.name, policy_->excluded_reason(h.spec.index)});
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
  std::unique_ptr<RecoveryPolicy> policy_;  // every recovery decision (recovery_policy.h)
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
  int world_ = 0, job_step_ = 0, stop_signal_ = 0, steps_repeated_ = 0;
  bool resumed_logged_ = false;
  double attempt_started_t_ = 0;  // Unix seconds (a second early): restore files of this attempt are newer
  json last_recovery_ = nullptr;  // the dashboard's view of the last recovery (null before one)
  ProgressWatch progress_;
  TrafficWatch traffic_;
  LossWatch loss_;
  std::set<int> ranks_ended_;  // reported ended to the dashboard (its rank numbers: the current world)
  std::set<int64_t> rank_pid_seen_;
  std::set<int> loss_seen_;
  std::map<int, std::string> last_error_;
  StepTimes step_times_;
  std::vector<double> fault_mono_;  // each fault's detection time (the event log's clock)
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
