// recovery_policy: the driver's recovery decisions as a pure component (launch-internal;
// docs/reliability.md "Recovery"), unit-tested on event sequences without processes
// (tests/launch/test_driver_policy.cpp, test_recovery_policy.cpp). The driver gathers observations
// (heartbeat ages, failed ranks, hang culprits, self-check verdicts), asks, and carries out the
// answer (processes, signals, events); every rule is here.
// The rules, as functions:
//  - blame_hang: which hosts a hang diagnosis' culprits are blamed on. A culprit stuck in a
//    checkpoint segment ("checkpoint-stage1", ...) is a storage fault, not a host fault: its host is
//    kept (unless its process was frozen: "was not scheduled", a stopped or starved process is its
//    host's wherever it stopped). Culprits on every active host (two or more) are a shared cause:
//    nobody is excluded.
//  - blame_selfchecks: which hosts the self-check verdicts exclude. When every checked host failed
//    the same way (two or more hosts, or one whose checks did not run), the cause is shared (the
//    store, the network, the software): nobody is excluded.
//  - blame_heartbeats: a host silent for the heartbeat timeout is blamed; every active host silent
//    at once (two or more) is a shared cause (the driver's side, the network): nobody is excluded.
//  - root_cause: which failed rank names an attempt's failure (killed by a signal, then an error
//    exit, then a communication failure, exit 86: the consequence of a peer's death).
//  - plan_attempt: the hosts of the next attempt (the first healthy ones; fewer than wanted: shrink).
//  - RetryPolicy: the limits that end the job instead of restarting (an error at start-up, the same
//    failure `same_failure_limit` times in a row, `max_restarts`).
// And as one object, RecoveryPolicy: the job's hosts (active, spare, excluded with the reason), the
// attempt and restart counts and the faults, fed in the order the driver sees things:
//   next_attempt -> judge_running / loss_spike -> on_fault -> ranks_stopped -> [hang_diagnosed]
//   -> after_stop -> [selfchecks_judged] -> restart -> next_attempt ...
// Guarantees: a host is excluded only when the evidence points at it alone, and once (each method
// returns only the hosts it newly excluded); every decision carries its reason in words.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launch/anomaly.h"       // LossSpikeAction
#include "launch/heartbeat.h"     // RankBeat
#include "launch/job_summary.h"   // FaultRecord
#include "launch/selfcheck_plan.h"  // HostVerdict

namespace ms::launch {

// Hosts to exclude, each with its reason; `cause`: "host" (some excluded), "storage", "shared" or
// "none"; `note`: why nobody (or not everybody named) was excluded.
struct Blame {
  std::string cause = "none";
  std::vector<std::pair<int, std::string>> exclude;
  std::string note;
};

// A culprit of a hang diagnosis (report/diagnose.h) with its host and the segment its dump was in
// ("" when unknown: no dump).
struct HangCulprit {
  int rank = -1, host = -1;
  std::string why, segment;
};

// A segment that writes or reads checkpoints ("checkpoint-stage1", "checkpoint-stage1-wait", ...).
bool is_storage_segment(const std::string& segment);

Blame blame_hang(const std::vector<HangCulprit>& culprits, const std::vector<int>& active_hosts);
Blame blame_selfchecks(const std::vector<HostVerdict>& verdicts);
// ages: (host, seconds since its last beat) of the active hosts.
Blame blame_heartbeats(const std::vector<std::pair<int, double>>& ages, double timeout_s);

// A failed rank of the current attempt as the executors report it.
struct FailedRank {
  int host = -1;
  RankBeat rank;
};
// The root cause among the failed ranks (none: nullopt).
std::optional<FailedRank> root_cause(const std::vector<FailedRank>& failed);
// "rank 2 killed by signal 9 (Killed)", "rank 1 exited with code 3", plus ": <its last error line>";
// kind "crash" or "nan" (the error line says the loss is not finite).
FaultRecord describe_rank_failure(const FailedRank& f, const std::string& last_error);

// A host excluded, with its reason.
struct Exclusion {
  int host = -1;
  std::string reason;
};

struct AttemptPlan {
  std::vector<int> hosts;  // indices into the healthy list's order
  bool shrunk = false;
};
AttemptPlan plan_attempt(const std::vector<int>& healthy, int wanted);

class RetryPolicy {
 public:
  RetryPolicy(int same_failure_limit, int max_restarts)
      : same_limit_(same_failure_limit), max_restarts_(max_restarts) {}
  // A fault whose ranks are stopped: the reason to end the job, or nullopt to recover. `step`: the
  // step the job had reached; `startup_error`: every rank of the first attempt failed before a step.
  std::optional<std::string> after_fault(const FaultRecord& f, int restarts, bool startup_error);
  int same_count() const { return same_count_; }

 private:
  int same_limit_, max_restarts_;
  int same_count_ = 0;
  std::optional<int> last_step_;
};

// ---- the policy as one object ---------------------------------------------------------------

struct PolicyOptions {
  std::vector<std::string> host_names;  // every host, by index (--hosts)
  int spare_hosts = 0;                  // the last K hosts wait as spares
  int same_failure_limit = 3, max_restarts = 10;
  bool selfcheck = true;                // self-checks before a restart
  LossSpikeAction loss_spike_action = LossSpikeAction::kWarn;
};

struct AttemptDecision {
  bool end = false;
  std::string reason;       // end: why ("no healthy host left")
  std::vector<int> hosts;   // the attempt's hosts, in rank order
  bool shrunk = false;      // fewer hosts than wanted
  bool first_shrink = false;  // shrunk, and the first time (the driver logs "shrink" once)
};

// What the driver saw of the running attempt at one wake-up.
struct RunningView {
  double now_s = 0;                                // the loop clock, in seconds
  std::vector<std::pair<int, double>> beat_ages;   // (active host, seconds since its last beat)
  std::vector<FailedRank> failed;                  // this attempt's ranks that failed
  const std::map<int, std::string>* last_error = nullptr;  // rank -> its last error line
  int ended = 0, ok = 0;                           // this attempt's ranks that ended / exited 0
  int world = 0, job_step = 0;
  std::optional<std::string> stalled, quiet;       // ProgressWatch / TrafficWatch verdicts
};

struct RunningVerdict {
  enum class Next { kContinue, kFault, kDone } next = Next::kContinue;
  FaultRecord fault;  // kFault: what, who, why
};

struct StopDecision {
  enum class Next { kSelfCheck, kRestart, kEnd } next = Next::kRestart;
  std::string reason;  // kEnd: why
};

class RecoveryPolicy {
 public:
  explicit RecoveryPolicy(PolicyOptions opt);

  // Hosts: the first hosts.size() - spare_hosts are wanted; an excluded host stays excluded.
  int host_count() const { return (int)opt_.host_names.size(); }
  int wanted_hosts() const { return wanted_; }
  bool excluded(int host) const { return excluded_.count(host) > 0; }
  std::string excluded_reason(int host) const;
  bool active(int host) const;
  const std::vector<int>& active_hosts() const { return active_; }
  // An exclusion the driver saw itself (an executor that did not start); false: excluded already.
  bool exclude(int host, const std::string& why);

  int attempt() const { return attempt_; }
  int restarts() const { return restarts_; }
  const std::vector<FaultRecord>& faults() const { return faults_; }

  // The next attempt's hosts among `available` (executors up and running; excluded ones are left
  // out): the first healthy ones, spares filling in; without enough, shrink; none: end.
  AttemptDecision next_attempt(const std::vector<int>& available);
  // The running attempt: a fault (in this order: hosts silent for `heartbeat_timeout_s`, a failed
  // rank once its peers' failures are in (500 ms, or every rank ended; a rank killed by a signal at
  // once), no progress, no traffic), the end (every rank exited 0), or nothing yet.
  RunningVerdict judge_running(const RunningView& v, double heartbeat_timeout_s);
  // A loss spike: a fault with --loss-spike-action restart, else nullopt (logged only).
  std::optional<FaultRecord> loss_spike(const std::string& why, int rank, int host) const;
  // A fault detected at `job_step`: recorded; the host of a silent or ended executor is excluded.
  std::vector<Exclusion> on_fault(FaultRecord f, int job_step);
  // How the ranks of the faulted attempt are stopped: a hang or traffic fault needs their hang dumps
  // (SIGUSR1: where each waits, for the diagnosis); any other fault (a rank that died, a lost host,
  // a non-finite loss, a spike) names its culprit already, and the ranks are SIGKILLed at once (a
  // recovery never saves; ~0.3-0.6 s of dumps and exits saved).
  bool wants_hang_dumps() const;
  // While the ranks stop: active hosts silent for the timeout are excluded.
  std::vector<Exclusion> silent_while_stopping(const std::vector<std::pair<int, double>>& ages, double timeout_s);
  // The ranks stopped; the job had reached `job_step`. True: a hang or traffic fault, whose culprits
  // a diagnosis should name (hang_diagnosed).
  bool ranks_stopped(int job_step);
  // The diagnosis' culprits: blame_hang over the active hosts; a storage or shared cause becomes
  // the fault's kind. Returns the blame with the newly excluded hosts.
  Blame hang_diagnosed(const std::vector<HangCulprit>& culprits);
  // The retry limits (RetryPolicy), then self-checks (unless off), else a restart.
  StopDecision after_stop();
  // The verdicts: blame_selfchecks. Returns the blame with the newly excluded hosts.
  Blame selfchecks_judged(const std::vector<HostVerdict>& verdicts);
  // The next attempt is decided on: attempt + 1, restarts + 1.
  void restart();

 private:
  // Keeps in b.exclude only the hosts not excluded before, and excludes them.
  void take(Blame& b);

  PolicyOptions opt_;
  int wanted_ = 1, attempt_ = 0, restarts_ = 0;
  std::map<int, std::string> excluded_;
  std::vector<int> active_;
  std::vector<FaultRecord> faults_;
  RetryPolicy retry_;
  std::optional<double> first_failure_s_;  // the attempt's first failed rank seen
  bool startup_error_ = false, shrink_logged_ = false;
};

}  // namespace ms::launch
