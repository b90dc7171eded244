// test_host_memory: a CPU rank's planned memory (plan/host_memory.h) against what the trainer's own
// objects allocate: a GPT built with the run's arguments (its footprint(), the real buffers) for
// parameters, gradients and activations, plus the optimizer's moments, ZeRO-2's shard and staging,
// the checkpointer's snapshot (parameters and moments owned), the export's copy of the whole model
// and the host file's process floor; the bf16 run adds the weights' bf16 copy; with LAMB the update
// buffer. (bench/bench_plan.sh compares the same plans with measured peak RSS.)
#include <gtest/gtest.h>

#include <cmath>

#include "host_fixture.h"
#include "model/gpt.h"
#include "plan/cluster_desc.h"
#include "plan/host_memory.h"
#include "plan/runnable.h"  // recompute_kind

namespace {

using namespace ms::plan;

ms::ModelConfig small_model() { return ms::testing::small_plan_model(); }

constexpr double kMiB = 1048576.0;

TEST(HostMemory, OneRankIsWhatTheTrainerAllocates) {
  const ClusterDesc c = parse_cluster_toml(ms::testing::host_toml(100, 50, 10, 1, 100), "host");
  const ms::ModelConfig m = small_model();
  for (const ms::DType prec : {ms::DType::kF32, ms::DType::kBF16})
    for (const bool lamb : {false, true}) {
      PlanLayout l;
      l.seq = 128, l.micro_batch = 2, l.global_batch = 2, l.precision = prec, l.lamb = lamb;
      const ms::GPT::Footprint f = ms::GPT(m, 2, 128, prec).footprint();
      const double P = static_cast<double>(f.params);
      const double expected = 4 * P + (prec == ms::DType::kBF16 ? 2 * P : 0) + 4 * P + 4.0 * f.activations +
                              4 * P * (lamb ? 3 : 2) + 12 * P + 200 * kMiB + 4 * P;
      EXPECT_NEAR(host_memory(m, l, c).total(), expected, 1.0) << ms::dtype_name(prec) << (lamb ? " lamb" : "");
    }
}

TEST(HostMemory, ZeroTwoShardsTheOptimizerAndTheSnapshot) {
  const ClusterDesc c = parse_cluster_toml(ms::testing::host_toml(100, 50, 10, 1, 100), "host");
  const ms::ModelConfig m = small_model();
  PlanLayout l;
  l.seq = 128, l.micro_batch = 2, l.dp = 2, l.global_batch = 4, l.precision = ms::DType::kF32, l.bucket_mb = 1;
  const ms::GPT::Footprint f = ms::GPT(m, 2, 128).footprint();
  const double P = static_cast<double>(f.params), local = std::ceil(P / 2), bucket = kMiB / 4;
  const MemoryEstimate e = host_memory(m, l, c);
  EXPECT_NEAR(e.optimizer, 8 * local + 8 * local + 8 * bucket, 1.0);
  EXPECT_NEAR(e.other, 12 * local + 220 * kMiB + 4 * P, 1.0);  // a Gloo rank's floor; rank 0 exports
  EXPECT_NEAR(e.params + e.grads + e.activations, 8 * P + 4.0 * f.activations, 1.0);
  l.saves_checkpoints = false;  // the snapshot buffer is never written: not resident
  EXPECT_NEAR(host_memory(m, l, c).other, 220 * kMiB + 4 * P, 1.0);
}

}  // namespace

namespace {
// Recomputation: the plan's activations are what a GPT built with that model.recompute allocates
// (one rule, model/gpt_activations.h), and they fall none > selective > full.
TEST(HostMemory, RecomputationFollowsTheTrainersOwnRule) {
  const ClusterDesc c = parse_cluster_toml(ms::testing::host_toml(100, 50, 10, 1, 100), "host");
  const ms::ModelConfig m = small_model();
  double prev = 0;
  for (const Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    PlanLayout l;
    l.seq = 128, l.micro_batch = 2, l.global_batch = 2, l.precision = ms::DType::kF32, l.recompute = r;
    ms::ModelConfig built = m;
    built.recompute = recompute_kind(r);
    const ms::GPT::Footprint f = ms::GPT(built, 2, 128).footprint();
    EXPECT_DOUBLE_EQ(host_memory(m, l, c).activations, 4.0 * f.activations) << static_cast<int>(r);
    if (prev > 0) {
      EXPECT_LT(4.0 * f.activations, prev) << static_cast<int>(r);
    }
    prev = 4.0 * f.activations;
  }
}
}  // namespace
