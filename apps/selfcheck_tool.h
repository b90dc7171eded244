// selfcheck_tool: `megascale selfcheck [--gemm] [--collective] [--out FILE] [--timeout S]
// [--size-mb X] [--iters K]`, the per-process self-check a driver spawns on every host after a
// fault (train/selfcheck.h: the checks). Runs the chosen checks (both when neither flag is given);
// the collective check joins the world from the launcher's environment (RANK, WORLD_SIZE,
// MEGASCALE_BACKEND, MEGASCALE_STORE, MEGASCALE_RUN_ID, MEGASCALE_HOST) like a training rank.
// Guarantees: stdout's last line is the result as one JSON object (selfcheck_report_json), also
// written atomically to --out when given, in every outcome this process survives. Exit code 0: every
// check run passed; 3: a check failed; 1: an error stopped the checks (rendezvous, timeout, dead
// peer; the result names it). Never hangs: rendezvous and every op are bounded by --timeout, and a
// hard deadline (3 x timeout + 30 s, +30 s with the GEMM check) writes an error result and ends
// the process (exit 1) without waiting for anything.
#pragma once
#include <string>

#include "base/device.h"  // Device

namespace CLI {
class App;
}

namespace ms {

struct SelfCheckArgs {
  bool gemm = false;        // run the GEMM check
  bool collective = false;  // run the collective check (neither flag: both)
  std::string out;          // result file (atomic), "" for none
  double timeout_s = 20;    // rendezvous and per-op deadline of the collective check
  double size_mb = 4;       // bandwidth all-reduce buffer (MiB)
  int iters = 8;            // timed bandwidth all-reduces
  double gemm_seconds = 0.4;  // the GEMM timing phase (the driver's checks after a fault: shorter)
  Device device = Device::kCpu;  // cuda: both checks on the GPU (selfcheck.h)
};

// Adds the `selfcheck` subcommand to `app`, filling `a`.
void add_selfcheck_command(CLI::App& app, SelfCheckArgs& a);
// Runs it if `app` parsed it: its exit code, or -1 when it was not given.
int run_selfcheck_command(const CLI::App& app, const SelfCheckArgs& a);

// The subcommand itself (exit code as above).
int run_selfcheck(const SelfCheckArgs& a);

}  // namespace ms
