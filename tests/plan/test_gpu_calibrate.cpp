// test_gpu_calibrate: plan/gpu_calibrate's arithmetic, which needs no GPU:
//  - the efficiencies of given rates against the built-in H100 description, by hand: a bf16 GEMM of
//    8192^3 has 64 x 32 = 2048 output tiles of 128 x 256 in ceil(2048 / 132) = 16 waves on 132 SMs,
//    so its quantization is 2048 / (16 x 132) and gemm_eta_inf = rate / (989 TFLOP/s x that);
//    flash_eta = rate / 989, mem_eta = GB/s / 3350; a rate above the peak is written as 1;
//  - the planner, given those constants, predicts the measured GEMM's time back (op_cost.h);
//  - the cluster file it writes loads back with every field;
//  - a CPU description or a zero rate is a named error.
// The measurement itself runs on the GPU machine (tests/apps/test_plan_cli.cpp, scripts/gpu/check.sh).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/gpu_calibrate.h"
#include "plan/op_cost.h"
#include "plan/op_graph.h"

namespace {

using namespace ms::plan;

GpuRates rates() {
  GpuRates r;
  r.device = "NVIDIA H100 80GB HBM3", r.gemm_dim = 8192;
  r.gemm_tflops = 700, r.attention_tflops = 400, r.memory_GBps = 2800;
  return r;
}

TEST(GpuCalibrate, EfficienciesAreTheRatesOverTheDescriptionsPeaks) {
  const ClusterDesc h100 = builtin_cluster("h100-80g");
  const EfficiencyTable e = gpu_efficiencies(h100, rates());
  const double quantization = 2048.0 / (16 * 132);
  EXPECT_NEAR(e.at("gemm_eta_inf"), 700 / (989 * quantization), 1e-12);
  EXPECT_NEAR(e.at("flash_eta"), 400.0 / 989, 1e-12);
  EXPECT_NEAR(e.at("mem_eta"), 2800.0 / 3350, 1e-12);
  GpuRates fast = rates();
  fast.gemm_tflops = 1200, fast.memory_GBps = 4000;
  const EfficiencyTable f = gpu_efficiencies(h100, fast);
  EXPECT_EQ(f.at("gemm_eta_inf"), 1.0);
  EXPECT_EQ(f.at("mem_eta"), 1.0);
}

TEST(GpuCalibrate, ThePlannerPredictsTheMeasuredGemmBack) {
  const ClusterDesc h100 = builtin_cluster("h100-80g");
  DeviceEfficiency d;
  d.gemm_eta_inf = gpu_efficiencies(h100, rates()).at("gemm_eta_inf"), d.launch_s = 0;
  PlanOp g;
  g.cls = OpClass::kGemm, g.m = g.n = g.k = 8192, g.fwd_flops = 2.0 * 8192 * 8192 * 8192;
  EXPECT_NEAR(op_seconds(g, false, ms::DType::kBF16, h100, d), g.fwd_flops / 700e12, 1e-12);
}

TEST(GpuCalibrate, TheClusterFileLoadsBack) {
  ClusterDesc c = builtin_cluster("h200-141g");
  c.efficiency = gpu_efficiencies(c, rates());
  const ClusterDesc back = parse_cluster_toml(gpu_cluster_toml(c, "a header\nof two lines"), "test.toml");
  EXPECT_EQ(back.device.name, c.device.name);
  EXPECT_EQ(back.device.peak_tflops, c.device.peak_tflops);
  EXPECT_DOUBLE_EQ(back.device.memory_GBps, c.device.memory_GBps);
  EXPECT_EQ(back.device.sms, c.device.sms);
  EXPECT_EQ(back.node.devices_per_node, c.node.devices_per_node);
  EXPECT_DOUBLE_EQ(back.node.intra_GBps, c.node.intra_GBps);
  EXPECT_DOUBLE_EQ(back.network.nic_Gbps, c.network.nic_Gbps);
  EXPECT_EQ(back.network.hosts_per_switch, c.network.hosts_per_switch);
  ASSERT_EQ(back.efficiency.size(), 3u);
  for (const auto& [k, v] : c.efficiency) EXPECT_NEAR(back.efficiency.at(k), v, 1e-3 * v) << k;
}

TEST(GpuCalibrate, BadInputIsNamed) {
  ClusterDesc cpu = builtin_cluster("h100-80g");
  cpu.device.kind = "cpu", cpu.source = "host.toml";
  ms::testing::expect_error([&] { gpu_efficiencies(cpu, rates()); }, {"host.toml", "kind 'cpu'"});
  GpuRates zero = rates();
  zero.attention_tflops = 0;
  ms::testing::expect_error([&] { gpu_efficiencies(builtin_cluster("h100-80g"), zero); }, {"must be > 0"});
}

}  // namespace
