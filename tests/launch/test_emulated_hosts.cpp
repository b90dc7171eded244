// test_emulated_hosts: training across two emulated hosts (scripts/emulated_cluster.sh: network
// namespaces on a bridge inside an outer namespace of their own, links shaped to 1 Gbit/s, Redis with
// a password on the first host). The driver starts one executor per host through
// "ip netns exec {host}", each rank's Gloo transport binds its host's address, and the rendezvous
// goes through the Redis host:
//  - dp = 2 across the hosts reproduces the single-process run within the data-parallel tolerances
//    of test_dp_equivalence (losses 1e-5 relative, weights 3e-5 relative L2, 1e-4 absolute);
//  - the log names the host of every rank with its (tp, dp, pp) coordinates;
//  - a host that does not exist is named (excluded: its executor could not start) before any step,
//    and so are a store address no host can reach and a host list that does not fit the layout;
//  - the cluster leaves nothing behind (no namespace, no redis-server).
// Needs root (CI runs as root) or unprivileged user namespaces; never skipped.
#include <gtest/gtest.h>

#include <unistd.h>  // getpid

#include <string>

#include "common/layout_runs.h"
#include "common/test_util.h"

namespace {

using ms::testing::run_cmd;

std::string cluster(int hosts) {
  return std::string("timeout 300 bash ") + MEGASCALE_SOURCE_DIR + "/scripts/emulated_cluster.sh --hosts " +
         std::to_string(hosts) + " --rate 1gbit --redis -- ";
}

std::string driver(const std::string& host_list, int per_host) {
  return ms::testing::megascale_bin() + " launch --hosts " + host_list + " --nproc-per-host " +
         std::to_string(per_host) + " --host-launcher 'ip netns exec {host}' --store redis://10.77.0.1:6379 --";
}

TEST(EmulatedHosts, DataParallelAcrossTwoHostsMatchesOneProcess) {
  ms::testing::LayoutRuns runs("emu_dp", ms::testing::layout_config(32, 1));
  runs.train(ms::testing::megascale_bin(), "ref", "");
  const std::string out =
      runs.train(cluster(2) + driver("10.77.0.1,10.77.0.2", 1), "hosts2", "--parallel.dp=2 --train.pin_threads=false");
  EXPECT_NE(out.find("2 host(s) 10.77.0.1,10.77.0.2, links 1gbit"), std::string::npos) << out;
  EXPECT_NE(out.find("placement: host 10.77.0.1: ranks 0 (tp=0,dp=0,pp=0)"), std::string::npos) << out;
  EXPECT_NE(out.find("placement: host 10.77.0.2: ranks 1 (tp=0,dp=1,pp=0)"), std::string::npos) << out;
  EXPECT_NE(out.find("ZeRO-2"), std::string::npos) << out;
  runs.expect_same_run("ref", "hosts2", 6, 1e-5, 3e-5, 1e-4);
}

TEST(EmulatedHosts, AHostThatDoesNotExistIsNamedBeforeAnyStep) {
  ms::testing::LayoutRuns runs("emu_bad", ms::testing::layout_config(32, 1));
  const auto r = run_cmd(cluster(2) + driver("10.77.0.1,10.77.0.9", 1) + " train " + runs.dir() +
                         "/cfg.toml --train.out_dir=" + runs.dir() + "/bad --parallel.dp=2");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("host 1 (10.77.0.9) excluded: its executor could not start"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step     1"), std::string::npos) << r.output;
}

// Bad multi-host input, each a named error before any step: a store address no host can reach, and a
// host list whose ranks do not fit the layout.
TEST(EmulatedHosts, AnUnreachableStoreAndAHostListThatDoesNotFitAreNamed) {
  ms::testing::LayoutRuns runs("emu_badin", ms::testing::layout_config(32, 1));
  const std::string train = " train " + runs.dir() + "/cfg.toml --train.out_dir=" + runs.dir() + "/bad";
  std::string unreachable = driver("10.77.0.1,10.77.0.2", 1);
  unreachable.replace(unreachable.find("redis://10.77.0.1:6379"), 22, "redis://10.99.0.1:6379");
  auto r = run_cmd(cluster(2) + unreachable + train + " --parallel.dp=2");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rendezvous store unreachable: redis://10.99.0.1:6379"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step     1"), std::string::npos) << r.output;
  r = run_cmd(cluster(2) + driver("10.77.0.1,10.77.0.2", 1) + train + " --parallel.dp=2 --parallel.pp=2");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("does not match the world size 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not retried"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step     1"), std::string::npos) << r.output;
}

TEST(EmulatedHosts, NothingIsLeftBehind) {
  // A process left running inside a host when the command ends: the cluster's end takes it along.
  const std::string marker = "sleep 987" + std::to_string(::getpid() % 1000);
  const auto r = run_cmd(cluster(3) + "sh -c 'ip netns list; echo store=$MS_CLUSTER_STORE; ip netns exec 10.77.0.3 " +
                         marker + " & sleep 0.2'");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("10.77.0.3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("store=redis://10.77.0.1:6379"), std::string::npos) << r.output;
  // The machine's own namespaces and processes: nothing of the cluster.
  EXPECT_EQ(run_cmd("ip netns list | grep -c '^10[.]77[.]0' || true").output.substr(0, 1), "0");
  EXPECT_EQ(run_cmd("ps -eo args | grep -c '^" + marker + "' || true").output.substr(0, 1), "0");
}

}  // namespace
