// launcher: `megascale launch`, a torchrun-style launcher of N local ranks (the first driver).
// run_launcher starts N child processes of one command on this machine, each in a process group of
// its own, with the environment a rank needs to find the others (CommEnv::from_environment reads it):
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MEGASCALE_BACKEND, MEGASCALE_STORE,
//   MEGASCALE_RUN_ID (unique per launch), MEGASCALE_HOST=127.0.0.1, and
//   OMP_NUM_THREADS = max(1, cores / N) unless the caller's environment sets it.
// Guarantees:
//  - The rendezvous store lives exactly as long as the launch (job_store.h): a fresh private folder
//    (mode 0700) for "file", or for "redis" a redis-server child on a free loopback port with a random
//    per-launch password (given to the ranks as MEGASCALE_STORE_PASSWORD, never logged);
//    "redis://host:port" is used as given and left alone.
//  - Nothing outlives the launch: every child dies with the launcher (parent-death signal), each
//    rank's process group is SIGKILLed at the end (on success too), and a janitor process
//    (janitor.h) kills them and removes the folders if the launcher itself is SIGKILLed.
//  - Every line a child writes is forwarded whole, prefixed "[rank k] ", stdout to stdout and stderr
//    to stderr; with quiet_others only rank 0's stdout is kept (every rank's stderr still is).
//  - When a child exits non-zero or dies by a signal, the launcher says which rank failed and how
//    ("rank 2 exited with code 1", "rank 1 killed by signal 9"), terminates the others (SIGTERM to
//    their process groups, SIGKILL after the grace period) and returns non-zero. SIGINT/SIGTERM
//    sent to the launcher are forwarded to the children the same way (SIGKILL after signal_grace);
//    SIGHUP (the terminal closed) reaches them as SIGTERM, so a training run saves and exits 0;
//    if every rank then exits 0 (a clean stop: training saves and exits), the launcher exits 0,
//    else 128+signal. A second signal kills the ranks at once. No child outlives the call.
//  - The launcher's own messages go to stderr as "megascale launch: <message>" lines (spdlog).
//  - Every launch has a private folder (mode 0700, removed at the end), exported to the ranks as
//    MEGASCALE_LAUNCH_DIR; rank 0 of a training run writes run.json there (its out_dir).
//  - Unless dashboard_port < 0, a live dashboard (dashboard.h: the page, /api/status, /metrics)
//    serves on dashboard_bind:dashboard_port (0: a free port) from before the first rank starts
//    until the launch ends (plus dashboard_linger_s), announced as
//    "megascale launch: dashboard at http://127.0.0.1:PORT/".
// The pieces live beside this file: signal_forwarding.h, rank_output.h, job_store.h, janitor.h,
// redis_server.h, process.h, dashboard.h and job_status.h. The multi-host driver is driver.h.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "launch/store_spec.h"

namespace ms {

struct LaunchOptions {
  int nproc = 1;                      // ranks to start, 1..1024
  std::vector<std::string> command;   // argv of every child; command[0] is the program (a path, or a name looked up in PATH)
  std::vector<std::string> janitor;   // argv of the janitor process (janitor.h); the application's, required
  launch::StoreSpec store{launch::StoreKind::kFile, ""};  // file, redis or redis://host:port (auto: file)
  std::string run_dir;                // parent folder of the file store; empty: the temporary folder
  std::string backend = "gloo";       // MEGASCALE_BACKEND of the children
  bool quiet_others = false;          // forward only rank 0's stdout
  std::chrono::milliseconds grace{5000};  // SIGTERM -> SIGKILL after a rank failed
  // SIGTERM -> SIGKILL after a signal to the launcher (preemption: the ranks save a checkpoint at
  // the next step boundary and exit 0; a launcher whose ranks all exit 0 then exits 0 too).
  std::chrono::milliseconds signal_grace{120000};
  // The live dashboard: port 0 = a free port (parallel launches never collide), < 0 = off.
  int dashboard_port = 0;
  std::string dashboard_bind = "127.0.0.1";  // loopback unless configured
  std::string dashboard_assets;              // the page's files (index.html, app.js, ...); the app knows where
  double dashboard_linger_s = 0;             // keep serving this long after the launch ended
};

// What happened to the ranks of one launch.
struct LaunchResult {
  int exit_code = 0;          // 0 when every rank exited 0; else the first failure's code (128+signal)
  int failed_rank = -1;       // first rank that failed, -1 if none did (or the launcher was signalled)
  std::string failure;        // "rank 2 exited with code 1", "launcher got signal 2", or empty
};

// Runs the launch to its end; throws ms::Error when it cannot start (bad options, a failed syscall,
// redis-server that does not come up). Messages about failures go to stderr.
LaunchResult run_launcher(const LaunchOptions& opt);

// Usable CPU cores of this process (its affinity mask), at least 1.
int usable_cores();
// The OpenMP threads each of `local_ranks` ranks on this machine gets by default: cores / ranks, >= 1.
int omp_threads_per_rank(int local_ranks);

}  // namespace ms
