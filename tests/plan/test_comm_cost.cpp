// test_comm_cost: the alpha-beta forms against their closed forms and nccl-tests' definitions: with
// no latency and no saturation a ring all-reduce's bus bandwidth equals the link's (the definition
// of busbw), and an all-gather's too; latency adds (n-1) or 2(n-1) steps; the tree wins for small
// messages on many ranks and the ring for large ones; one rank costs nothing; saturation halves the
// bandwidth at S_half.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/comm_cost.h"

using namespace ms::plan;

TEST(CommCost, RingsMoveAtTheLinkBandwidthByNcclTestsDefinition) {
  Link link;
  link.bandwidth_Bps = 25e9;
  for (int n : {2, 8, 192}) {
    const double S = 1e9;
    EXPECT_NEAR(all_reduce_bus_Bps(S, ring_all_reduce_seconds(S, n, link), n), 25e9, 1.0);
    EXPECT_NEAR(all_gather_bus_Bps(S, ring_all_gather_seconds(S, n, link), n), 25e9, 1.0);
    EXPECT_DOUBLE_EQ(ring_reduce_scatter_seconds(S, n, link), ring_all_gather_seconds(S, n, link));
  }
  EXPECT_EQ(ring_all_reduce_seconds(1e9, 1, link), 0.0);
  EXPECT_EQ(all_reduce_seconds(1e9, 1, link), 0.0);
}

TEST(CommCost, LatencyStepsTreeAgainstRingAndSaturation) {
  Link link;
  link.bandwidth_Bps = 25e9, link.latency_s = 5e-6;
  const int n = 64;
  EXPECT_DOUBLE_EQ(ring_all_reduce_seconds(0, n, link), 2.0 * 63 * 5e-6);
  EXPECT_DOUBLE_EQ(ring_all_gather_seconds(0, n, link), 63 * 5e-6);
  EXPECT_DOUBLE_EQ(tree_all_reduce_seconds(0, n, link), 2.0 * 6 * 5e-6);
  EXPECT_DOUBLE_EQ(all_reduce_seconds(1024, n, link), tree_all_reduce_seconds(1024, n, link));
  EXPECT_DOUBLE_EQ(all_reduce_seconds(1e9, n, link), ring_all_reduce_seconds(1e9, n, link));
  EXPECT_DOUBLE_EQ(p2p_seconds(1e6, link), 5e-6 + 1e6 / 25e9);
  link.half_bytes = 1e6, link.eta_inf = 0.8;
  EXPECT_DOUBLE_EQ(link.effective_Bps(1e6), 25e9 * 0.8 * 0.5);
  EXPECT_NEAR(link.effective_Bps(1e12) / (25e9 * 0.8), 1.0, 1e-5);
}

TEST(CommCost, BadLinksAreNamed) {
  Link link;
  ms::testing::expect_error([&] { ring_all_reduce_seconds(1e6, 4, link); }, {"link bandwidth"});
  link.bandwidth_Bps = 1e9;
  ms::testing::expect_error([&] { ring_all_reduce_seconds(1e6, 0, link); }, {"over 0 ranks"});
}
