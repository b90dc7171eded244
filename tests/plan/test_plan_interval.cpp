// test_plan_interval: the range around a prediction from the cluster's [uncertainty], in closed form:
// MFU +- the held-out RMS in points, the step's range from the same FLOPs (step x MFU constant);
// a relative step error gives step x (1 +- r) and the MFU range from it; both: the wider; neither
// (or a zero prediction): no range. The [uncertainty] section reads and validates by name.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/cluster_desc.h"
#include "plan/plan_interval.h"

using namespace ms::plan;

namespace {

TEST(PlanInterval, OneRmsEitherSideAndTheStepFromTheSameFlops) {
  Uncertainty u;
  EXPECT_FALSE(plan_interval(2.0, 0.5, u).known);
  u.mfu_points = 3.0, u.basis = "held-out folds";
  const PlanInterval a = plan_interval(2.0, 0.5, u);
  ASSERT_TRUE(a.known);
  EXPECT_DOUBLE_EQ(a.mfu_lo, 0.47);
  EXPECT_DOUBLE_EQ(a.mfu_hi, 0.53);
  EXPECT_DOUBLE_EQ(a.step_lo, 2.0 * 0.5 / 0.53);
  EXPECT_DOUBLE_EQ(a.step_hi, 2.0 * 0.5 / 0.47);
  EXPECT_EQ(a.basis, "held-out folds");
  Uncertainty r;
  r.step_relative = 0.15;
  const PlanInterval b = plan_interval(2.0, 0.5, r);
  EXPECT_DOUBLE_EQ(b.step_lo, 2.0 * 0.85);
  EXPECT_DOUBLE_EQ(b.step_hi, 2.0 * 1.15);
  EXPECT_DOUBLE_EQ(b.mfu_lo, 0.5 / 1.15);
  u.step_relative = 0.15;  // both: the wider on each side
  const PlanInterval c = plan_interval(2.0, 0.5, u);
  EXPECT_DOUBLE_EQ(c.mfu_lo, std::min(0.47, 0.5 / 1.15));
  EXPECT_DOUBLE_EQ(c.mfu_hi, std::max(0.53, 0.5 / 0.85));
  EXPECT_FALSE(plan_interval(0.0, 0.5, u).known);
  u.step_relative = 0, u.mfu_points = 80;  // never below zero
  EXPECT_GT(plan_interval(2.0, 0.5, u).mfu_lo, 0.0);
}

TEST(PlanInterval, TheUncertaintySectionIsReadAndChecked) {
  const std::string base = "[device]\nkind = \"gpu\"\nname = \"X\"\npeak_tflops = { bf16 = 1.0, fp32 = 1.0 }\n"
                           "memory_gib = 1.0\nmemory_GBps = 1.0\n[node]\ndevices_per_node = 8\nintra_GBps = 1.0\n"
                           "intra_latency_us = 1.0\n[network]\nnics_per_node = 8\nnic_Gbps = 1.0\n"
                           "inter_latency_us = 1.0\nhosts_per_switch = 4\n";
  const ClusterDesc c =
      parse_cluster_toml(base + "[uncertainty]\nmfu_points = 2.5\nbasis = \"plan_validate\"\n", "x.toml");
  EXPECT_DOUBLE_EQ(c.uncertainty.mfu_points, 2.5);
  EXPECT_EQ(c.uncertainty.basis, "plan_validate");
  ms::testing::expect_error([&] { parse_cluster_toml(base + "[uncertainty]\nstep_relative = 1.5\n", "x.toml"); },
                            {"x.toml", "[uncertainty]", "step_relative 1.5"});
  ms::testing::expect_error([&] { parse_cluster_toml(base + "[uncertainty]\nsigma = 1\n", "x.toml"); },
                            {"[uncertainty] unknown key 'sigma'"});
}

}  // namespace
