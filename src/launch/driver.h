// driver: `megascale launch --hosts HOSTS -- CMD...`, MegaScale's robust-training driver
// (docs/reliability.md). It starts one executor per host (executor.h, through a host launcher:
// host_launcher.h), runs the job's ranks on the first hosts (the rest are spares), and watches the
// executors' heartbeats (heartbeat.h). It detects a fault when:
//  - a rank exits non-zero or is killed, or an executor ends;
//  - an executor sends no heartbeat for `heartbeat_timeout_s`;
//  - no rank completes a step for max(stall.min_s, stall.factor x the median step time) (before the
//    attempt's first step: stall.startup_s), or the ranks move no bytes for `traffic_timeout_s`;
//  - a loss is not finite (the rank stops the step and exits; its error line names the kind "nan");
//    a loss spike (z-score over a window) is logged and, with loss_spike_action = kRestart
//    (`--loss-spike-action restart`), handled as a fault.
// Every recovery decision is the policy's (recovery_policy.h RecoveryPolicy); this file gathers
// what it needs and carries the decisions out.
// Recovery: every rank is stopped (SIGCONT + SIGUSR1 to each process group: a hang dump and exit
// without saving; SIGKILL after `stop_grace`); for a hang, the hang diagnosis' culprits' hosts are
// excluded; self-checks run on every remaining host (selfcheck_plan.h) and hosts that fail are
// excluded — except for a shared cause (recovery_policy.h: a culprit stuck in a checkpoint segment
// is storage; every host failing the same way, or silent at once, excludes nobody); spare hosts replace excluded ones, and without spares data parallelism shrinks to the
// healthy hosts (the ranks reshard the checkpoint when they resume); the ranks restart from the
// newest valid checkpoint (train.resume = auto) with MEGASCALE_RESTART_COUNT = the attempt. The same
// failure (kind and step) `same_failure_limit` times in a row, or `max_restarts` restarts, ends the
// job with the reason.
// SIGTERM / SIGINT to the driver: the ranks get SIGTERM (they save at the next step boundary and
// exit 0), no restart; the driver exits 0 when every rank did.
// Every decision goes to the event log (event_log.h) in <log_dir>/events.jsonl; the end writes
// <log_dir>/summary.json and prints the summary: faults, restarts, steps repeated, excluded hosts
// and the effective training time ratio (ETTR = the final trajectory's step time / wall time).
// The rendezvous store is watched: a dead redis-server of the driver's is started again, a store
// that cannot be reached ends the job ("rendezvous store unreachable"). The loop never blocks on
// its output (output_queue.h: rank lines dropped when nobody reads) and judges heartbeat, progress
// and traffic ages on its own loop clock (anomaly.h LoopClock: a stopped driver blames no one).
// Guarantees: nothing outlives the driver: executors are its children in process groups of their
// own that die with it (and end their ranks when the control channel closes); the rendezvous store
// and the driver's folders are removed at the end.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "launch/anomaly.h"     // StallOptions, LossSpikeAction
#include "launch/store_spec.h"  // StoreSpec

namespace ms::launch {

// How the driver starts the application's helpers on a host: the argv prefixes the application
// gives (the library knows no subcommand names), e.g. {"/path/megascale", "executor"}.
struct ToolCommands {
  std::vector<std::string> executor;   // runs run_executor (executor.h); the driver appends --host-index,
                                       // --address, --beat-ms, --run-dir, --error-pattern, --warning-pattern
  std::vector<std::string> selfcheck;  // one self-check process (selfcheck_plan.h appends its flags)
  std::vector<std::string> janitor;    // the janitor process (janitor.h)
};

struct DriverOptions {
  std::string hosts = "localhost";       // --hosts: "localhost*3", "a,b,c"
  int nproc_per_host = 1;                // ranks per host
  int spare_hosts = 0;                   // the last K hosts wait as spares
  std::vector<std::string> command;      // argv of every rank (resolved)
  ToolCommands tools;                    // how to start executors and self-checks (required)
  std::string host_launcher = "local";   // host_launcher.h
  StoreSpec store;                       // auto (file when every host is local, else redis), file, redis, redis://h:p
  std::string backend = "gloo";
  std::string run_dir;                   // parent of the job's temporary folders (empty: the temporary folder)
  std::string log_dir;                   // events.jsonl and summary.json (empty: ./megascale-launch/<job id>)
  bool quiet_others = false;
  // Warm standby processes of `command` on every host (standby.h): restarts and spares take them
  // instead of starting processes. Only for a command that waits for its assignment (the
  // application knows: `megascale train` does).
  bool standby = false;
  double heartbeat_s = 1.0;
  double heartbeat_timeout_s = 10.0;
  StallOptions stall;
  double traffic_timeout_s = 60.0;       // <= 0: off
  int loss_window = 20;
  double loss_z = 6.0;                   // <= 0: spikes not judged
  LossSpikeAction loss_spike_action = LossSpikeAction::kWarn;
  int max_restarts = 10;
  int same_failure_limit = 3;
  bool selfcheck = true;
  double selfcheck_gemm_margin = 0.5;
  double selfcheck_timeout_s = 60.0;
  std::chrono::milliseconds stop_grace{3000};
  std::chrono::milliseconds signal_grace{120000};
  std::vector<std::string> error_patterns, warning_patterns;  // empty: executor.h's defaults
  // The dashboard (dashboard.h): port 0 = a free port, < 0 = off.
  int dashboard_port = 0;
  std::string dashboard_bind = "127.0.0.1";
  std::string dashboard_assets;
};

struct DriverResult {
  int exit_code = 0;
  std::string reason;   // empty on success
  int faults = 0, restarts = 0;
  double ettr = 0;
};

// Runs the job to its end. Throws ms::Error when it cannot start (bad options, no executor).
DriverResult run_driver(const DriverOptions& opt);

}  // namespace ms::launch
