// test_scale_cost: the costs that grow with scale against closed forms.
//  - E[max of n standard normals]: 0 for one, 1/sqrt(pi) for two, 3/(2 sqrt(pi)) for three (both
//    exact), the tabulated 1.0294 (4), 1.1630 (5), 1.5388 (10), 2.5076 (100) and 3.2414 (1,000)
//    (Tippett 1925; Harter 1961), increasing in n and under sqrt(2 ln n);
//  - the straggler wait is linear in the compute and the spread, 0 without either or for one device;
//  - a data-parallel group's hosts in the trainer's rank order; its ring's link is the NIC itself
//    under one switch set and bandwidth x spine_eta / oversubscription above it (latency kept), so
//    a ring all-reduce's bandwidth term grows by exactly oversubscription / spine_eta.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/comm_cost.h"
#include "plan/scale_cost.h"

using namespace ms::plan;

namespace {

TEST(ScaleCost, ExpectedMaximumOfNormalsMatchesTheTables) {
  EXPECT_EQ(expected_max_std_normal(1), 0.0);
  EXPECT_NEAR(expected_max_std_normal(2), 1.0 / std::sqrt(M_PI), 1e-9);
  EXPECT_NEAR(expected_max_std_normal(3), 1.5 / std::sqrt(M_PI), 1e-9);
  for (const auto& [n, e] : {std::pair{4, 1.0294}, std::pair{5, 1.1630}, std::pair{10, 1.5388},
                             std::pair{100, 2.5076}, std::pair{1000, 3.2414}})
    EXPECT_NEAR(expected_max_std_normal(n), e, 1e-4) << n;
  double last = 0;
  for (int n : {2, 8, 64, 512, 4096, 12288, 100000}) {
    const double e = expected_max_std_normal(n);
    EXPECT_GT(e, last) << n;
    EXPECT_LT(e, std::sqrt(2 * std::log(n))) << n;
    last = e;
  }
}

TEST(ScaleCost, StragglerWaitIsComputeTimesSpreadTimesTheExpectedMaximum) {
  EXPECT_EQ(straggler_seconds(10.0, 0.0, 4096), 0.0);
  EXPECT_EQ(straggler_seconds(10.0, 0.02, 1), 0.0);
  EXPECT_NEAR(straggler_seconds(10.0, 0.02, 2), 10.0 * 0.02 / std::sqrt(M_PI), 1e-12);
  EXPECT_NEAR(straggler_seconds(20.0, 0.01, 1000), straggler_seconds(10.0, 0.02, 1000), 1e-12);
}

TEST(ScaleCost, TheRingSeesTheUpperTiersOnlyAboveOneSwitchSet) {
  EXPECT_EQ(dp_group_hosts(8, 192, 8), 192);  // MegaScale at 12,288 GPUs: one DP member per host
  EXPECT_EQ(dp_group_hosts(8, 16, 8), 16);
  EXPECT_EQ(dp_group_hosts(2, 8, 8), 2);  // tp 2: four DP members per host
  EXPECT_EQ(dp_group_hosts(1, 1, 8), 1);
  const Link nic{25e9, 5e-6, 0.8, 0};
  const Link under = dp_ring_link(nic, 64, 64, 0.7, 2.0);
  EXPECT_EQ(under.bandwidth_Bps, nic.bandwidth_Bps);
  const Link above = dp_ring_link(nic, 65, 64, 0.7, 2.0);
  EXPECT_DOUBLE_EQ(above.bandwidth_Bps, 25e9 * 0.7 / 2.0);
  EXPECT_EQ(above.latency_s, nic.latency_s);
  const double bytes = 1e9;
  const int n = 192;
  const double lat = 2.0 * (n - 1) * nic.latency_s;
  EXPECT_NEAR(ring_all_reduce_seconds(bytes, n, above) - lat,
              (ring_all_reduce_seconds(bytes, n, nic) - lat) * 2.0 / 0.7, 1e-9);
  EXPECT_EQ(dp_ring_link(nic, 200, 64, 1.0, 1.0).bandwidth_Bps, nic.bandwidth_Bps) << "nothing lost: nothing changes";
}

}  // namespace
