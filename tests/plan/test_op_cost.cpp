// test_op_cost: the roofline's closed forms: a GEMM whose tiles fill whole waves runs at eta_inf;
// one tile more than the SMs needs two waves (eta halves, plus one SM's share); a shallow K
// approaches half at k_half; the time is the larger of compute and memory plus the launches
// (two for a GEMM's backward); collectives cost nothing here; bad efficiencies are named.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/op_cost.h"

using namespace ms;
using namespace ms::plan;

TEST(OpCost, WaveQuantization) {
  const ClusterDesc a100 = builtin_cluster("a100-80g");  // 108 SMs
  DeviceEfficiency e;
  e.gemm_eta_inf = 0.8, e.gemm_k_half = 0;
  EXPECT_DOUBLE_EQ(gemm_efficiency(128.0 * 108, 256, 4096, a100, e), 0.8);              // 108 tiles: one full wave
  EXPECT_DOUBLE_EQ(gemm_efficiency(128.0 * 216, 256, 4096, a100, e), 0.8);              // two full waves
  EXPECT_DOUBLE_EQ(gemm_efficiency(128.0 * 109, 256, 4096, a100, e), 0.8 * 109 / 216);  // a second, nearly empty wave
  EXPECT_DOUBLE_EQ(gemm_efficiency(100, 100, 4096, a100, e), 0.8 / 108);                // one tile on 108 SMs
  e.gemm_k_half = 512;
  EXPECT_DOUBLE_EQ(gemm_efficiency(128.0 * 108, 256, 512, a100, e), 0.4);
  ClusterDesc cpu = a100;
  cpu.device.sms = 0;
  EXPECT_DOUBLE_EQ(gemm_efficiency(1, 1, 512, cpu, e), 0.4);
}

TEST(OpCost, RooflineAndLaunches) {
  const ClusterDesc a100 = builtin_cluster("a100-80g");
  DeviceEfficiency e;
  e.gemm_eta_inf = 1.0, e.launch_s = 1e-5, e.mem_eta = 1.0, e.attention_eta = 0.5;
  PlanOp g;
  g.cls = OpClass::kGemm, g.m = 128.0 * 108, g.n = 256, g.k = 8192;
  g.fwd_flops = 2 * g.m * g.n * g.k, g.bwd_flops = 2 * g.fwd_flops;
  EXPECT_DOUBLE_EQ(op_seconds(g, false, DType::kBF16, a100, e), g.fwd_flops / 312e12 + 1e-5);
  EXPECT_DOUBLE_EQ(op_seconds(g, true, DType::kBF16, a100, e), g.bwd_flops / 312e12 + 2e-5);
  EXPECT_DOUBLE_EQ(op_seconds(g, false, DType::kF32, a100, e), g.fwd_flops / 19.5e12 + 1e-5);
  PlanOp ew;
  ew.cls = OpClass::kElementwise, ew.fwd_bytes = 2039e9 * 1e-3;  // 1 ms of HBM traffic
  EXPECT_DOUBLE_EQ(op_seconds(ew, false, DType::kBF16, a100, e), 1e-3 + 1e-5);
  // Unfused attention (Megatron's): the batched GEMMs at attention_eta, then the scores' passes over
  // memory, one kernel after the other (4 launches forward, 6 backward); FlashAttention: one fused
  // kernel, the roofline's max at flash_eta.
  PlanOp att;
  att.name = "attention", att.cls = OpClass::kAttention;
  att.fwd_flops = att.bwd_flops = 312e12 * 1e-3, att.fwd_bytes = att.bwd_bytes = 2039e9 * 1e-3;
  EXPECT_DOUBLE_EQ(op_seconds(att, false, DType::kBF16, a100, e), 2e-3 + 1e-3 + 4e-5);
  EXPECT_DOUBLE_EQ(op_seconds(att, true, DType::kBF16, a100, e), 2e-3 + 1e-3 + 6e-5);
  att.name = "flash-attention", e.flash_eta = 0.25;
  EXPECT_DOUBLE_EQ(op_seconds(att, false, DType::kBF16, a100, e), 4e-3 + 1e-5);  // compute-bound at 0.25
  att.fwd_bytes = 2039e9 * 5e-3;
  EXPECT_DOUBLE_EQ(op_seconds(att, false, DType::kBF16, a100, e), 5e-3 + 1e-5);  // memory-bound
  PlanOp coll;
  coll.cls = OpClass::kCollective, coll.coll_bytes = 1e9;
  EXPECT_EQ(op_seconds(coll, false, DType::kBF16, a100, e), 0.0);
  e.mem_eta = 0;
  ms::testing::expect_error([&] { op_seconds(ew, false, DType::kBF16, a100, e); }, {"memory eta 0"});
}
