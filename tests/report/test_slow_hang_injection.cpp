// Hang localization end to end (docs/observability.md "Hang localization"): a 2x2x2 (dp x tp x pp)
// tiny-model run of 8 ranks on Gloo (`megascale launch`) and on MPI (mpirun), parallel.timeout_s = 4;
// after a few steps one rank is stopped with SIGSTOP (a hung process). Every rank must end within a
// bound (exit code 86, or killed by the launcher), and `megascale diagnose` must name exactly the
// stopped rank and its coordinates. A second case injects a sleeping rank through MEGASCALE_FAULT
// when the binary supports it (sleep:rank=R:step=N:seconds=S: the rank never enters the step's
// collectives).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "common/processes.h"
#include "parallel/pp_runs.h"

namespace ms::testing {
namespace {

namespace fs = std::filesystem;

// The pid of the process whose command line holds `marker` and whose environment says it is world
// rank `rank` (RANK= under megascale launch, OMPI_COMM_WORLD_RANK= under mpirun); -1 if none.
pid_t find_rank_pid(const std::string& marker, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmd = slurp(e.path().string() + "/cmdline");
    if (cmd.find(marker) == std::string::npos || cmd.find("train") == std::string::npos) continue;
    if (cmd.find("launch") != std::string::npos) continue;  // the launcher itself
    const std::string env = slurp(e.path().string() + "/environ");
    const std::string r = std::to_string(rank);
    for (const std::string key : {"RANK=", "OMPI_COMM_WORLD_RANK="})
      if (env.find(std::string("\0", 1) + key + r + std::string("\0", 1)) != std::string::npos ||
          env.rfind(key + r + std::string("\0", 1), 0) == 0)
        return static_cast<pid_t>(std::stoi(name));
  }
  return -1;
}

size_t steps_logged(const std::string& out_dir) {
  std::ifstream f(out_dir + "/log.jsonl");
  std::string line;
  size_t n = 0;
  while (std::getline(f, line))
    if (line.find("\"step\"") != std::string::npos && line.find("\"loss\"") != std::string::npos) n++;
  return n;
}

class HangInjection : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g = new LayoutRuns("hang", pp_config()); }
  static void TearDownTestSuite() { delete g; }
  static LayoutRuns* g;

  // Starts the 2x2x2 run under `prefix`, stops `victim` with SIGSTOP after 3 logged steps (or lets a
  // MEGASCALE_FAULT injection act when `fault` is set), waits for the end, and runs diagnose.
  void run_and_diagnose(const std::string& name, bool mpi, int victim, const std::string& fault) {
    const std::string out = g->dir() + "/" + name;
    const std::string args = " train " + g->dir() + "/cfg.toml --train.out_dir=" + out +
                             " --train.steps=100000 --checkpoint.every=0 --train.eval_every=0" + pp_layout(2, 2, 2, false) +
                             " --parallel.timeout_s=4 --obs.watchdog_grace_s=1";
    std::vector<std::string> argv;
    std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", "1"}};
    if (!fault.empty()) env["MEGASCALE_FAULT"] = fault;
    if (mpi) {
      argv = {"mpirun", "--oversubscribe", "-np", "8", "-x", "OMP_NUM_THREADS=1"};
      if (!fault.empty()) argv.insert(argv.end(), {"-x", "MEGASCALE_FAULT"});
      env["OMPI_ALLOW_RUN_AS_ROOT"] = "1", env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
      env["OMPI_MCA_btl"] = "self,tcp", env["OMPI_MCA_btl_tcp_if_include"] = "lo", env["OMPI_MCA_oob_tcp_if_include"] = "lo";
      argv.push_back(megascale_bin());
    } else {
      argv = {megascale_bin(), "launch", "--nproc", "8", "--"};
    }
    std::istringstream ss(args);
    for (std::string a; ss >> a;) argv.push_back(a);
    const Clock::time_point start = Clock::now();
    Proc job = spawn(argv, env, g->dir() + "/" + name + ".txt");
    pid_t victim_pid = -1;
    if (fault.empty()) {
      wait_all({&job}, start, 240, [&] { return steps_logged(out) >= 3; });
      ASSERT_FALSE(job.done) << "the run ended before it was stopped:\n" << job.output();
      victim_pid = find_rank_pid("--train.out_dir=" + out, victim);
      ASSERT_GT(victim_pid, 0) << "no process of rank " << victim;
      ASSERT_EQ(kill(victim_pid, SIGSTOP), 0);
    }
    const Clock::time_point stopped = Clock::now();
    // timeout 4 s + grace 1 s, then the launcher's / mpirun's teardown (SIGKILL after 5 s): 60 s is loose.
    wait_all({&job}, start, seconds_since(start) + 90);
    const double took = seconds_since(stopped);
    if (victim_pid > 0) kill(victim_pid, SIGKILL);  // normally gone with the job already
    const std::string log = job.output();
    std::printf("%s ended %.1f s after the stop with code %d\n", name.c_str(), took, job.code);
    EXPECT_LT(took, 60.0) << log;
    EXPECT_NE(job.code, 0) << log;
    if (!mpi) {
      EXPECT_EQ(job.code, 86) << "the first rank to end must end with the hang exit code:\n" << log;
    }
    EXPECT_NE(log.find("ending with exit code 86"), std::string::npos) << log;

    const CmdResult d = run_cmd(megascale_bin() + " diagnose " + out);
    std::printf("%s", d.output.c_str());
    EXPECT_EQ(d.code, 0) << d.output << "\n--- run output ---\n" << log;
    const int tp = victim % 2, dp = victim / 2 % 2, pp = victim / 4;
    const std::string want = "culprit: rank " + std::to_string(victim) + " (tp=" + std::to_string(tp) + ",dp=" +
                             std::to_string(dp) + ",pp=" + std::to_string(pp) + ")";
    EXPECT_NE(d.output.find(want), std::string::npos) << d.output << "\n--- run output ---\n" << log;
    size_t culprits = 0;
    for (size_t at = d.output.find("culprit:"); at != std::string::npos; at = d.output.find("culprit:", at + 1)) culprits++;
    EXPECT_EQ(culprits, 1u) << "exactly the stopped rank must be named:\n" << d.output;
  }
};
LayoutRuns* HangInjection::g = nullptr;

TEST_F(HangInjection, StoppedRankIsNamedOnGloo) { run_and_diagnose("gloo_stop", false, 5, ""); }

TEST_F(HangInjection, StoppedRankIsNamedOnMpi) { run_and_diagnose("mpi_stop", true, 6, ""); }

// MEGASCALE_FAULT=sleep (obs/fault_injection.h): the rank sleeps at the start of step 4, before any
// of the step's collectives.
TEST_F(HangInjection, SleepingRankIsNamedOnGloo) {
  run_and_diagnose("gloo_sleep", false, 3, "sleep:rank=3:step=4:seconds=40");
}

TEST_F(HangInjection, SleepingRankIsNamedOnMpi) {
  run_and_diagnose("mpi_sleep", true, 2, "sleep:rank=2:step=4:seconds=40");
}

}  // namespace
}  // namespace ms::testing
