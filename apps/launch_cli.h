// launch_cli: the command lines of `megascale launch` (one machine: --nproc N; driver mode:
// --hosts HOSTS, docs/reliability.md) and of the hidden `megascale executor` the driver starts on
// each host. Only wiring: the work is in src/launch (launcher.h, driver.h, executor.h).
#pragma once
#include "launch/driver.h"    // DriverOptions
#include "launch/executor.h"  // ExecutorOptions
#include "launch/launcher.h"  // LaunchOptions

namespace CLI {
class App;
}

namespace ms {

struct LaunchArgs {
  LaunchOptions single;          // --nproc
  launch::DriverOptions driver;  // --hosts
  std::string hosts;             // given: driver mode
  std::string store = "file";    // --store as given (parsed into single.store / driver.store)
  std::string loss_spike_action = "warn";  // --loss-spike-action as given (parsed into driver's)
  double stop_grace_s = 3, signal_grace_s = 120, stall_factor = 10, stall_min_s = 30, startup_s = 300;
  launch::ExecutorOptions executor;
  int executor_beat_ms = 1000;
  bool standby = true;           // --no-standby clears it
};

void add_launch_commands(CLI::App& app, LaunchArgs& a);
// Runs `launch` or `executor` when given (returns its exit code), else -1.
int run_launch_command(CLI::App& app, LaunchArgs& a);

}  // namespace ms
