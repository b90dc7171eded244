// test_host_cost: a step on a CPU host (plan/host_cost.h through predict_step) against closed forms
// on a synthetic host whose tables are constant (host_fixture.h): one rank's step is the sum over
// the op list of GEMM FLOPs / the GEMM rate + attention FLOPs / its rate + element-wise bytes (fp32
// activations) / the memory rate, plus the optimizer; data parallelism adds exactly its
// collectives from the comm table (buckets of bucket_mb, the parameter all-gather, the tied
// embedding's token rows) and nothing to the compute of a rank; tensor parallelism charges every
// collective of the op list in full (no overlap on CPU cores, no second all-gather for the weight
// gradient), at the busy rows' times (measured right after compute) when the host file has them;
// ranks x threads above the cores slow compute down by that factor.
#include <gtest/gtest.h>

#include <cmath>

#include "host_fixture.h"
#include "plan/cluster_desc.h"
#include "plan/step_model.h"

namespace {

using namespace ms::plan;

ms::ModelConfig small_model() { return ms::testing::small_plan_model(); }

constexpr double kGemm = 100, kAtt = 50, kMem = 10, kAdam = 2, kCommUs = 100;

ClusterDesc host() { return parse_cluster_toml(ms::testing::host_toml(kGemm, kAtt, kMem, kAdam, kCommUs), "host"); }

PlanLayout one_rank() {
  PlanLayout l;
  l.seq = 128, l.micro_batch = 2, l.global_batch = 2, l.precision = ms::DType::kF32, l.zero = 2;
  return l;
}

// Forward + backward seconds of an op list at the constant rates.
double closed_form(const std::vector<PlanOp>& ops) {
  double s = 0;
  for (const PlanOp& op : ops) {
    if (op.cls == OpClass::kGemm) s += (op.fwd_flops + op.bwd_flops) / (kGemm * 1e9);
    if (op.cls == OpClass::kAttention) s += (op.fwd_flops + op.bwd_flops) / (kAtt * 1e9);
    if (op.cls == OpClass::kElementwise) s += (op.fwd_bytes + op.bwd_bytes) / (kMem * 1e9);
  }
  return s;
}

double model_closed_form(const ms::ModelConfig& m, const OpGraphOptions& o) {
  double s = closed_form(embedding_ops(m, o)) + closed_form(head_ops(m, o));
  for (int l = 0; l < m.n_layer; l++) s += closed_form(layer_ops(m, l, o));
  return s;
}

OpGraphOptions graph(int tp) {
  OpGraphOptions o;
  o.seq = 128, o.micro_batch = 2, o.tp = tp, o.sequence_parallel = true, o.act_bytes = 4;  // fp32 on CPU
  return o;
}

TEST(HostCost, OneRankIsTheSumOfItsOperations) {
  const ms::ModelConfig m = small_model();
  const StepPrediction p = predict_step(m, one_rank(), host(), plan_constants(host()));
  EXPECT_NEAR(p.compute, model_closed_form(m, graph(1)), 1e-12);
  EXPECT_EQ(p.tp_exposed + p.bubble + p.pp_exposed + p.dp_exposed + p.other, 0.0);
  EXPECT_GT(p.optimizer, 0.0);
  EXPECT_NEAR(p.step_s, p.compute + p.optimizer, 1e-12);
}

TEST(HostCost, DataParallelAddsItsCollectivesOnly) {
  const ms::ModelConfig m = small_model();
  const ClusterDesc c = host();
  const StepPrediction one = predict_step(m, one_rank(), c, plan_constants(c));
  PlanLayout l = one_rank();
  l.dp = 2, l.global_batch = 4, l.bucket_mb = 1.0 / 16;  // 64 KiB buckets
  const StepPrediction two = predict_step(m, l, c, plan_constants(c));
  EXPECT_NEAR(two.compute, one.compute, 1e-12);  // the 1-thread table is the same constant
  // Every gradient bucket, the parameter all-gather and the token rows are below the table's
  // smallest size (1 MiB): 100 us each.
  const double grad_bytes = 4.0 * (one.optimizer / (kAdam * 1e-9));  // the parameters, from the optimizer pass
  const double buckets = std::ceil(grad_bytes / 65536.0);
  EXPECT_NEAR(two.dp_exposed, (buckets + 2) * kCommUs * 1e-6, 1e-12);
  EXPECT_NEAR(two.optimizer, one.optimizer / 2, 1e-12);  // ZeRO: half the parameters each
}

TEST(HostCost, TensorParallelChargesEveryCollectiveOfTheOpList) {
  const ms::ModelConfig m = small_model();
  const ClusterDesc c = host();
  PlanLayout l = one_rank();
  l.tp = 2;
  const StepPrediction p = predict_step(m, l, c, plan_constants(c));
  // Sequential block with SP: per layer 2 all-gathers + 2 reduce-scatters forward, mirrored
  // backward (8); embedding 1 + 1, head 1 + 1, the cross-entropy's statistics 1: 21 collectives of
  // at most 64 KiB, 100 us each.
  EXPECT_NEAR(p.tp_exposed, 21 * kCommUs * 1e-6, 1e-12);
  EXPECT_NEAR(p.compute, model_closed_form(m, graph(2)), 1e-12);
}

TEST(HostCost, OversubscribedCoresSlowComputeDown) {
  const ms::ModelConfig m = small_model();
  const ClusterDesc c = host();
  PlanLayout l = one_rank();
  l.dp = 2, l.global_batch = 4;
  const StepPrediction fair = predict_step(m, l, c, plan_constants(c));
  l.threads = 2;  // 2 ranks x 2 threads on 2 cores
  const StepPrediction over = predict_step(m, l, c, plan_constants(c));
  EXPECT_NEAR(over.compute, 2 * fair.compute, 1e-12);
  EXPECT_NEAR(over.dp_exposed, fair.dp_exposed, 1e-12);
}

}  // namespace

namespace {

// With "<op>_busy" rows in the host file (collectives timed right after compute), tensor-parallel
// collectives are priced with them: 21 collectives at the busy row's 300 us instead of 100 us.
TEST(HostCost, TensorParallelUsesTheBusyCollectivesWhenMeasured) {
  std::string text = ms::testing::host_toml(kGemm, kAtt, kMem, kAdam, kCommUs);
  const std::string busy = "{ ranks = 2, bytes = [1048576, 2097152], us = [300, 600] }";
  text += "all_gather_busy = " + busy + "\nreduce_scatter_busy = " + busy + "\nall_reduce_busy = " + busy + "\n";
  const ClusterDesc c = parse_cluster_toml(text, "host");
  PlanLayout l = one_rank();
  l.tp = 2;
  EXPECT_NEAR(predict_step(small_model(), l, c, plan_constants(c)).tp_exposed, 21 * 300e-6, 1e-12);
}

}  // namespace
