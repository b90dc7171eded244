// test_memory_model: the memory per device against the closed forms it is built from:
//  - one stage, one rank: the parameters are SC21 eq. 2 plus the final LayerNorm (2h), which eq. 2
//    leaves out; 16 bytes per parameter for bf16 + Adam without ZeRO (2 + 4 + 12, Megatron's mixed
//    precision), 4 + 4/d + 12/d with ZeRO-2;
//  - activations: per layer x layers per stage x min(m, p) for 1F1B, x p (1 + (p-1)/(p v))
//    interleaved (Korthikanti), FlashAttention as selective recomputation;
//  - MegaScale's 175B layout (t 8, p 8, v 6, SP, FlashAttention, ZeRO-2, 256 A100s) fits in 80 GiB;
//    the same model on one GPU does not, and the optimizer is named as the largest term;
//  - layouts that cannot split the model are named.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/memory_model.h"

using namespace ms::plan;

namespace {

GptShape gpt175() {
  GptShape m;
  m.heads = 128, m.hidden = 12288, m.layers = 96, m.seq = 2048, m.vocab = 64000;
  return m;
}

TEST(MemoryModel, OneStageHoldsEquationTwoAndSixteenBytesPerParameter) {
  const GptShape m = gpt175();
  MemoryLayout l;
  l.zero = 0;
  const double P = stage_params(m, l, 0);
  EXPECT_DOUBLE_EQ(P, megatron_params(m) + 2.0 * m.hidden);
  const MemoryEstimate e = estimate_memory(m, l, builtin_cluster("a100-80g"));
  EXPECT_DOUBLE_EQ(e.params + e.grads + e.optimizer, 18.0 * P);  // 2 + 4 + 12
  EXPECT_FALSE(e.fits);
  EXPECT_EQ(e.largest, "optimizer");
  l.zero = 2, l.dp = 8, l.bucket_bytes = 0;
  const MemoryEstimate z = estimate_memory(m, l, builtin_cluster("a100-80g"));
  EXPECT_DOUBLE_EQ(z.grads, 4.0 * P / 8);
  EXPECT_DOUBLE_EQ(z.optimizer, 12.0 * P / 8);
  l.weight_bytes = 4;  // fp32 training: the weights are the master copy
  EXPECT_DOUBLE_EQ(estimate_memory(m, l, builtin_cluster("a100-80g")).optimizer, 8.0 * P / 8);
}

TEST(MemoryModel, ActivationsInFlightFollowTheSchedule) {
  const GptShape m = gpt175();
  MemoryLayout l;
  l.tp = 8, l.pp = 8, l.dp = 4, l.micro_batches = 64, l.sequence_parallel = true, l.flash_attention = true;
  const double per_layer = layer_activation_bytes(m, 1, 8, true, Recompute::kSelective);
  MemoryEstimate e = estimate_memory(m, l, builtin_cluster("a100-80g"));
  EXPECT_EQ(e.stage, 0);
  EXPECT_DOUBLE_EQ(e.activations, per_layer * 12 * 8);  // 1F1B: p micro-batches on stage 0
  l.micro_batches = 3;
  EXPECT_DOUBLE_EQ(estimate_memory(m, l, builtin_cluster("a100-80g")).activations, per_layer * 12 * 3);
  l.micro_batches = 64, l.virtual_stages = 6;
  e = estimate_memory(m, l, builtin_cluster("a100-80g"));
  EXPECT_DOUBLE_EQ(e.activations, per_layer * 12 * 8 * (1.0 + 7.0 / 48.0));
  EXPECT_TRUE(e.fits) << e.total() / (1 << 30) << " GiB";
  EXPECT_EQ(e.largest, "activations");
}

TEST(MemoryModel, LayoutsThatCannotSplitTheModelAreNamed) {
  const GptShape m = gpt175();
  MemoryLayout l;
  l.pp = 7;
  ms::testing::expect_error([&] { estimate_memory(m, l, builtin_cluster("a100-80g")); }, {"96 layers", "pp 7"});
  l.pp = 8, l.virtual_stages = 5;
  ms::testing::expect_error([&] { estimate_memory(m, l, builtin_cluster("a100-80g")); }, {"virtual stages 5"});
  l.virtual_stages = 1, l.tp = 3;
  ms::testing::expect_error([&] { estimate_memory(m, l, builtin_cluster("a100-80g")); }, {"128 heads", "tp 3"});
}

}  // namespace
