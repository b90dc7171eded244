// recovery_policy: the driver's recovery decisions as pure functions of what it observed
// (launch-internal; docs/reliability.md "Recovery"), unit-tested on event sequences without
// processes (tests/launch/test_driver_policy.cpp):
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
// Guarantees: a host is excluded only when the evidence points at it alone; every decision carries
// its reason in words.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

}  // namespace ms::launch
