// selfcheck_tool.cpp: see selfcheck_tool.h.
#include "selfcheck_tool.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>   // fflush
#include <cstdlib>  // getenv
#include <map>
#include <mutex>
#include <thread>

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include "base/atomic_file.h"  // write_text_atomic
#include "base/check.h"        // MS_CHECK
#include "base/clock.h"        // SteadyClock, seconds_since
#include "comm/comm_env.h"     // CommEnv
#include "obs/fault_injection.h"  // fault_fails_selfcheck
#include "comm/comm_fatal.h"   // end_process_now
#include "comm/world.h"        // init_world
#include "train/selfcheck.h"   // run_gemm_check, run_collective_check, SelfCheckReport

namespace ms {

namespace {

// Prints the result as stdout's last line and writes it to `out` (when set). False (with a message
// on stderr) when the file cannot be written.
bool publish(const SelfCheckReport& r, const std::string& out) {
  const std::string j = selfcheck_report_json(r);
  fmt::print("{}\n", j);
  std::fflush(stdout);
  if (out.empty()) return true;
  try {
    write_text_atomic(out, j + "\n");
    return true;
  } catch (const std::exception& e) {
    fmt::print(stderr, "selfcheck: cannot write the result: {}\n", e.what());
    std::fflush(stderr);
    return false;
  }
}

// Ends the process with an error result when the checks outlive `limit`: a wait the comm deadline
// did not bound, a GEMM that never returns. The main thread calls finish() before publishing.
class HardDeadline {
 public:
  HardDeadline(double limit_s, const std::string& out) : out_(out) {
    thread_ = std::thread([this, limit_s] {
      std::unique_lock lk(mu_);
      const auto until = SteadyClock::now() + std::chrono::duration<double>(limit_s);
      if (cv_.wait_until(lk, until, [this] { return done_; })) return;
      progress_.error = fmt::format("selfcheck exceeded its hard deadline of {:.0f} s", limit_s);
      progress_.seconds = limit_s;
      fmt::print(stderr, "selfcheck: error: {}\n", progress_.error);
      publish(progress_, out_);
      end_process_now(1);
    });
  }
  ~HardDeadline() { finish(); }
  // What the deadline's result says: this process's identity and the checks finished so far (those
  // asked for and not finished read as failed).
  void set_progress(const SelfCheckReport& r) {
    std::lock_guard lk(mu_);
    progress_ = r;
  }
  void finish() {
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string out_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  SelfCheckReport progress_;
  std::thread thread_;
};

}  // namespace

void add_selfcheck_command(CLI::App& app, SelfCheckArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "selfcheck", "self-check of this process's host after a fault: GEMM correctness + GFLOP/s, all-reduce "
                   "correctness + bandwidth over the launcher's world; JSON result on stdout's last line");
  cmd->add_flag("--gemm", a.gemm, "run the GEMM check (neither --gemm nor --collective: both)");
  cmd->add_flag("--collective", a.collective, "run the collective check with the ranks of the environment's world");
  cmd->add_option("-o,--out", a.out, "also write the JSON result to this file (atomically)");
  cmd->add_option("--timeout", a.timeout_s, "seconds: deadline of the rendezvous and of every collective")
      ->check(CLI::Range(0.1, 3600.0))->capture_default_str();
  cmd->add_option("--size-mb", a.size_mb, "MiB all-reduced per bandwidth iteration")
      ->check(CLI::Range(0.001, 4096.0))->capture_default_str();
  cmd->add_option("--iters", a.iters, "timed bandwidth all-reduces")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--gemm-seconds", a.gemm_seconds, "seconds of timed GEMMs for the GFLOP/s (at least one GEMM)")
      ->check(CLI::Range(0.0, 60.0))
      ->capture_default_str();
  cmd->add_option("--device", a.device, "cpu, or cuda: the GEMM through cuBLASLt and the all-reduced buffers in GPU "
                  "memory (GPU local_rank; MEGASCALE_BACKEND=nccl, or gloo / mpi through pinned host staging)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, Device>{{"cpu", Device::kCpu}, {"cuda", Device::kCuda}}))
      ->capture_default_str();
}

int run_selfcheck_command(const CLI::App& app, const SelfCheckArgs& a) {
  if (!app.got_subcommand("selfcheck")) return -1;
  return run_selfcheck(a);
}

int run_selfcheck(const SelfCheckArgs& a) {
  const auto t0 = SteadyClock::now();
  const bool do_gemm = a.gemm || !a.collective, do_collective = a.collective || !a.gemm;
  HardDeadline deadline((do_collective ? 3 * a.timeout_s + 30 : 0) + (do_gemm ? 30 : 0), a.out);
  SelfCheckReport r;
  r.gemm_requested = do_gemm, r.collective_requested = do_collective;
  deadline.set_progress(r);
  try {
    CommEnv env = CommEnv::from_environment();
    r.rank = env.rank, r.world = env.world_size, r.host_index = env.host_index;
    deadline.set_progress(r);
    if (a.device == Device::kCuda) select_cuda_device(env.local_rank);  // a named error without a GPU
    if (do_collective) {
      CollectiveCheckOptions opt;
      // MEGASCALE_FAULT selfcheck:host=H (obs/fault_injection.h, which announces it): rank+2 instead of rank+1.
      opt.inject_fault = r.host_index >= 0 && fault_fails_selfcheck(r.host_index);
      opt.bench_bytes = static_cast<size_t>(a.size_mb * (1 << 20)) / sizeof(float) * sizeof(float);
      opt.bench_iters = a.iters;
      opt.device = a.device;
      env.timeout = std::chrono::milliseconds(static_cast<int64_t>(a.timeout_s * 1000.0));
      std::unique_ptr<Communicator> world = init_world(env);
      r.rank = world->rank(), r.world = world->size();
      r.collective = run_collective_check(*world, opt);
      deadline.set_progress(r);
    }
    if (do_gemm) {
      GemmCheckOptions g;
      g.device = a.device;
      g.bench_seconds = a.gemm_seconds;
      r.gemm = run_gemm_check(g);
    }
  } catch (const CommError& e) {
    // A communication failure: publish and end at once (a timed-out MPI collective may still own a
    // buffer; peers may be gone, so nothing is waited for).
    r.error = e.what();
    r.seconds = seconds_since(t0);
    deadline.finish();
    fmt::print(stderr, "selfcheck: error: {}\n", r.error);
    publish(r, a.out);
    end_process_now(1);
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  r.seconds = seconds_since(t0);
  deadline.finish();
  if (!r.error.empty()) fmt::print(stderr, "selfcheck: error: {}\n", r.error);
  if (!publish(r, a.out)) return 1;
  return !r.error.empty() ? 1 : r.ok() ? 0 : 3;
}

}  // namespace ms
