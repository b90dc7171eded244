// executor: one host's agent of a driven job (`megascale executor`, started by the driver through
// a host launcher; docs/reliability.md "Driver and executors"). It takes commands on stdin and
// reports on stdout (heartbeat.h), and:
//  - starts the host's ranks of an attempt (`run`): each in a process group of its own that dies
//    with the executor, with RANK / LOCAL_RANK / WORLD_SIZE / LOCAL_WORLD_SIZE, MEGASCALE_HOST (its
//    address), MEGASCALE_HOST_INDEX, MEGASCALE_RESTART_COUNT (the attempt), a private
//    MEGASCALE_LAUNCH_DIR and the command's environment (store, run id, password);
//    OMP_NUM_THREADS = cores / local ranks unless set;
//  - moves the previous attempt's record files and hang dumps of its ranks to
//    <out_dir>/attempts/<k>/ before attempt k+1 starts (the tools read the last attempt in records/);
//  - sends a heartbeat every `beat` and at once when a rank ends: each rank's process state and its
//    last step, loss, tokens/s and segment times (tailing the ranks' record files), the bytes its
//    ranks' collectives and sends/receives moved since the last beat, and the ranks' log lines that
//    match the error / warning / fault patterns; rank stdout lines go to the driver as `line`
//    messages, rank stderr to the executor's stderr, prefixed "[rank k] "; both through bounded
//    queues written by threads (output_queue.h), so a driver that does not read never blocks the
//    loop: lines are dropped, beats are not (a beat waits while the last one is still queued, and
//    the next carries the news of both);
//  - stops the ranks (`stop`): SIGCONT and the signal to every process group, SIGKILL after the
//    grace (a stopped process too); a finished attempt's process groups are always SIGKILLed too, so
//    no grandchild outlives it;
//  - runs self-check processes (`selfcheck`) and reports their results;
//  - exits when told (`exit`) or when stdin ends (the driver is gone): every process group is
//    SIGKILLed and its private folder removed first.
// Guarantees: nothing it started outlives it; a malformed command is reported on stderr and skipped.
#pragma once
#include <chrono>
#include <string>
#include <vector>

namespace ms::launch {

struct ExecutorOptions {
  int host = 0;                               // index of the host in the driver's list
  std::string address = "127.0.0.1";         // what the ranks' transports bind to (MEGASCALE_HOST)
  std::chrono::milliseconds beat{1000};      // heartbeat interval
  std::string run_dir;                       // parent of its private folder (empty: the temporary folder)
  // ECMAScript regular expressions (case-insensitive) matched against every rank line.
  std::vector<std::string> error_patterns, warning_patterns;
  std::vector<std::string> janitor;          // argv of the janitor process (janitor.h); the application's
};

// Runs until `exit` or the end of stdin; returns the exit code.
int run_executor(const ExecutorOptions& opt);

// The default patterns (`megascale launch --error-pattern/--warning-pattern` replace them).
std::vector<std::string> default_error_patterns();
std::vector<std::string> default_warning_patterns();

}  // namespace ms::launch
