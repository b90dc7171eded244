// test_slow_slurm: megascale under a real Slurm (22.05, Debian slurm-wlm + munge) on emulated hosts
// (scripts/emulated_cluster.sh --slurm: munged and slurmctld on the head node, one slurmd per host in
// the host's network namespace, torn down with the cluster):
//  - `srun -N2 --ntasks-per-node=2 megascale train` with Gloo (ranks from SLURM_PROCID / SLURM_NTASKS /
//    SLURM_LOCALID, each rank's address found on its host's interface, Redis store with a password)
//    and with MPI (`srun --mpi=pmix`, OpenMPI over TCP on the emulated subnet): dp2 x pp2, the same
//    losses and weights as one process (the layout-equivalence tolerances);
//  - the driver inside an allocation (`--host-launcher "srun --jobid=J -N1 -n1 -w {host}"`, hosts
//    h1=auto,h2=auto: Slurm node names that do not resolve, addresses found on the hosts) trains dp=2
//    and survives a kill -9 of a rank: one restart from the last checkpoint, the job completes;
//  - the README's batch script (scripts/slurm/megascale.sbatch) submitted with `sbatch --wait -N2`:
//    its own Redis on the first node, the driver, dp2 x pp2 with the single process's losses.
// Needs root (CI runs as root), slurm-wlm and munge (scripts/setup.sh installs them); never skipped.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/layout_runs.h"
#include "common/test_util.h"
#include "launch/host_launcher.h"  // shell_quote
#include "parallel/tp_runs.h"

namespace {

using ms::testing::run_cmd;

std::string slurm_cluster(bool redis = true) {
  return std::string("timeout 600 bash ") + MEGASCALE_SOURCE_DIR + "/scripts/emulated_cluster.sh --hosts 2 --rate 1gbit " +
         (redis ? "--redis " : "") + "--slurm -- ";
}

TEST(Slurm, SrunTrainsWithGlooAndWithMpiLikeOneProcess) {
  ms::testing::LayoutRuns runs("slurm_srun", ms::testing::kTpConfig);
  runs.train(ms::testing::megascale_bin(), "ref", "");
  const std::string layout = "--parallel.dp=2 --parallel.pp=2 --train.pin_threads=false";
  const std::string gloo = runs.train(slurm_cluster() + "env MEGASCALE_STORE=redis://10.77.0.1:6379 srun -N2 "
                                      "--ntasks-per-node=2 --kill-on-bad-exit=1 " + ms::testing::megascale_bin(),
                                      "srun_gloo", layout);
  EXPECT_NE(gloo.find("world 4 (gloo backend)"), std::string::npos) << gloo;
  EXPECT_NE(gloo.find("placement: host 10.77.0.2: ranks 2 (tp=0,dp=0,pp=1), 3 (tp=0,dp=1,pp=1)"), std::string::npos)
      << gloo;
  runs.expect_same_run("ref", "srun_gloo", 6, 1e-5, 3e-5, -1);
  const std::string mpi = runs.train(slurm_cluster() + "env OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=10.77.0.0/24 "
                                     "OMPI_MCA_oob_tcp_if_include=10.77.0.0/24 OMP_NUM_THREADS=1 srun --mpi=pmix -N2 "
                                     "--ntasks-per-node=2 --kill-on-bad-exit=1 " + ms::testing::megascale_bin(),
                                     "srun_mpi", layout);
  EXPECT_NE(mpi.find("world 4 (mpi backend)"), std::string::npos) << mpi;
  runs.expect_same_run("ref", "srun_mpi", 6, 1e-5, 3e-5, -1);
}

TEST(Slurm, DriverInsideAnAllocationSurvivesAKilledRank) {
  ms::testing::LayoutRuns runs("slurm_driver", ms::testing::kTpConfig);
  const std::string out = runs.dir() + "/drv";
  const std::string script =
      "salloc -N2 --no-shell >/dev/null 2>&1; J=$(squeue -h -o %i | head -1); " + ms::testing::megascale_bin() +
      " launch --hosts h1=auto,h2=auto --nproc-per-host 1 --host-launcher \"srun --jobid=$J -N1 -n1 -w {host}\" "
      "--store redis://10.77.0.1:6379 --log-dir " + out + "/driver -- train " + runs.dir() + "/cfg.toml "
      "--train.out_dir=" + out + " --train.steps=12 --parallel.dp=2 --train.pin_threads=false --checkpoint.every=2 "
      "--checkpoint.dir=" + out + "/ckpt & p=$!; until grep -q '\"step\":5,\"step_ms\"' " + out +
      "/log.jsonl 2>/dev/null; do sleep 0.02; done; pkill -9 -n -f '^[^ ]*megascale train'; wait $p";
  const auto r = run_cmd(slurm_cluster() + "sh -c " + ms::launch::shell_quote(script));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("placement: host 10.77.0.2: ranks 1 (tp=0,dp=1,pp=0)"), std::string::npos) << r.output;
  std::ifstream f(out + "/driver/summary.json");
  ASSERT_TRUE(f.good()) << r.output;
  const auto s = nlohmann::json::parse(f);
  EXPECT_EQ(s["final_step"].get<int>(), 12) << s.dump();
  EXPECT_EQ(s["restarts"].get<int>(), 1) << s.dump();
  EXPECT_EQ(s["faults"].size(), 1u) << s.dump();
}

// The batch script the README documents (scripts/slurm/megascale.sbatch), as a user submits it: it
// starts its own Redis with a fresh password on the first node and the driver over `srun --overlap`;
// dp2 x pp2 on 2 nodes x 2 ranks gives the single process's losses and weights.
TEST(Slurm, TheDocumentedBatchScriptTrainsLikeOneProcess) {
  ms::testing::LayoutRuns runs("slurm_sbatch", ms::testing::kTpConfig);
  runs.train(ms::testing::megascale_bin(), "ref", "");
  const std::string out = runs.dir() + "/sbatch";
  const std::string script =
      "env MEGASCALE_BIN=" + ms::testing::megascale_bin() + " MEGASCALE_NPROC_PER_HOST=2 MEGASCALE_DRIVER_ARGS='--log-dir " +
      out + "_driver' sbatch --wait -N2 -o " + runs.dir() + "/slurm.out " + MEGASCALE_SOURCE_DIR +
      "/scripts/slurm/megascale.sbatch " + runs.dir() + "/cfg.toml --train.out_dir=" + out +
      " --parallel.dp=2 --parallel.pp=2 --train.pin_threads=false; rc=$?; cat " + runs.dir() + "/slurm.out; exit $rc";
  const auto r = run_cmd(slurm_cluster(/*redis=*/false) + "sh -c " + ms::launch::shell_quote(script));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("placement: host 10.77.0.2: ranks 2 (tp=0,dp=0,pp=1), 3 (tp=0,dp=1,pp=1)"), std::string::npos)
      << r.output;
  runs.expect_same_run("ref", "sbatch", 6, 1e-5, 3e-5, -1);
  std::ifstream f(out + "_driver/summary.json");
  ASSERT_TRUE(f.good()) << r.output;
  EXPECT_EQ(nlohmann::json::parse(f)["restarts"].get<int>(), 0);
}

}  // namespace
