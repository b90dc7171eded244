// plan_calibrate: `megascale plan --calibrate-host --ranks R --out HOST.toml` (planner.md §6):
// writes this machine's CPU host file: [device] (kind "cpu", its cores, the hardware peak per
// dtype measured by kernels/hw_peak.h, memory and the triad bandwidth, comm_engine "cores"),
// [node] / [network] (one host; the loopback collectives' latency and bandwidth), the measured
// compute tables (plan/host_calibrate.h) and [comm.gloo] / [comm.mpi] fitted to `megascale bench
// comm` at R ranks. Guarantees: the file is written atomically and loads back through
// plan::load_cluster (checked before it is written); a failed measurement is a named error and
// no file.
// With --device cuda it calibrates this machine's GPU instead (plan/gpu_calibrate.h): the
// description of --cluster (or the built-in h100-80g / h200-141g the device's name gives) with the
// measured compute constants in [efficiency]; the communication constants stay the planner's
// defaults and `megascale plan` says so.
#pragma once
#include <string>

namespace ms {

struct CalibrateHostArgs {
  int ranks = 2;
  std::string out;
  bool quick = false;  // a small grid and few repetitions (tests): seconds instead of a minute or two
  std::string device = "cpu";  // cpu: this host's ranks; cuda: this machine's GPU
  std::string cluster;         // --device cuda: the GPU description to calibrate ("": by the device's name)
};

int run_calibrate_host(const CalibrateHostArgs& a);

}  // namespace ms
