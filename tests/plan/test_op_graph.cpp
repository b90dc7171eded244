// test_op_graph: the planner's operation lists against the FLOP counts they must add up to:
//  - unfused attention (all s x s scores), one device: forward + backward of every layer and the LM
//    head per token is Korthikanti's eq. 7, exactly;
//  - FlashAttention (the keys each query attends): three times the forward is the trainer's own
//    model_flops_per_token (model/flops.h), for full and sliding-window attention;
//  - tensor parallelism splits every GEMM and the attention exactly t ways (x t = the whole);
//  - the regions' collectives: with sequence parallelism a sequential layer enters and leaves two
//    regions (2 all-gathers + 2 reduce-scatters forward; backward 2 reduce-scatters and 4
//    all-gathers, two of them for the weight gradients), the parallel block one; without it
//    all-reduces; each moves N h activations;
//  - attended keys: (s+1)/2 causal, w for a window far shorter than s.
#include <gtest/gtest.h>

#include <map>

#include "common/test_util.h"
#include "model/flops.h"
#include "plan/model_math.h"
#include "plan/op_graph.h"

using namespace ms;
using namespace ms::plan;

namespace {

ModelConfig gpt(BlockKind block, AttentionKind att) {
  ModelConfig m;
  m.n_layer = 12, m.n_embd = 768, m.n_head = 12, m.vocab_size = 50257, m.max_seq_len = 1024;
  m.block = block, m.attention = att, m.window = 256, m.full_every = 4;
  return m;
}

double per_token(const ModelConfig& m, const OpGraphOptions& o, bool forward_only) {
  double f = 0;
  auto add = [&](const std::vector<PlanOp>& ops) {
    for (const PlanOp& op : ops) f += forward_only ? op.fwd_flops : op.fwd_flops + op.bwd_flops;
  };
  for (int l = 0; l < m.n_layer; l++) add(layer_ops(m, l, o));
  add(embedding_ops(m, o));
  add(head_ops(m, o));
  return f / (static_cast<double>(o.seq) * o.micro_batch);
}

TEST(OpGraph, UnfusedAttentionAddsUpToEquationSeven) {
  const ModelConfig m = gpt(BlockKind::kSequential, AttentionKind::kFull);
  OpGraphOptions o;
  o.seq = 1024, o.micro_batch = 2, o.attention = AttentionImpl::kUnfused;
  GptShape s;
  s.layers = m.n_layer, s.hidden = m.n_embd, s.heads = m.n_head, s.seq = o.seq, s.vocab = m.vocab_size;
  EXPECT_NEAR(per_token(m, o, false) / megatron_flops_per_token(s), 1.0, 1e-12);
}

TEST(OpGraph, FlashAttentionForwardIsTheTrainersModelFlops) {
  for (AttentionKind att : {AttentionKind::kFull, AttentionKind::kSliding})
    for (BlockKind block : {BlockKind::kSequential, BlockKind::kParallel}) {
      const ModelConfig m = gpt(block, att);
      OpGraphOptions o;
      o.seq = 1024;
      EXPECT_NEAR(3.0 * per_token(m, o, true) / model_flops_per_token(m, o.seq), 1.0, 1e-12);
    }
}

TEST(OpGraph, TensorParallelismSplitsTheWorkExactly) {
  const ModelConfig m = gpt(BlockKind::kParallel, AttentionKind::kSliding);
  OpGraphOptions one, four;
  one.seq = four.seq = 512;
  four.tp = 4, four.sequence_parallel = true;
  EXPECT_NEAR(4.0 * per_token(m, four, false) / per_token(m, one, false), 1.0, 1e-12);
}

std::map<Collective, int> count(const std::vector<PlanOp>& ops, bool backward) {
  std::map<Collective, int> c;
  for (const PlanOp& op : ops)
    if (op.cls == OpClass::kCollective && (backward ? op.bwd_coll : op.fwd_coll) != Collective::kNone)
      c[backward ? op.bwd_coll : op.fwd_coll]++;
  return c;
}

TEST(OpGraph, RegionsCollectivesPerBlock) {
  OpGraphOptions o;
  o.seq = 1024, o.tp = 2, o.sequence_parallel = true;
  const ModelConfig seq = gpt(BlockKind::kSequential, AttentionKind::kFull),
                    par = gpt(BlockKind::kParallel, AttentionKind::kFull);
  const auto s = layer_ops(seq, 0, o), p = layer_ops(par, 0, o);
  using M = std::map<Collective, int>;
  EXPECT_EQ(count(s, false), (M{{Collective::kAllGather, 2}, {Collective::kReduceScatter, 2}}));
  EXPECT_EQ(count(s, true), (M{{Collective::kAllGather, 4}, {Collective::kReduceScatter, 2}}));
  EXPECT_EQ(count(p, false), (M{{Collective::kAllGather, 1}, {Collective::kReduceScatter, 1}}));
  for (const PlanOp& op : s) {
    if (op.cls != OpClass::kCollective) continue;
    EXPECT_DOUBLE_EQ(op.coll_bytes, 1024.0 * 768 * 2);
  }
  o.sequence_parallel = false;
  EXPECT_EQ(count(layer_ops(seq, 0, o), false), (M{{Collective::kAllReduce, 2}}));
  EXPECT_EQ(count(layer_ops(seq, 0, o), true), (M{{Collective::kAllReduce, 2}}));
  EXPECT_EQ(count(layer_ops(par, 0, o), false), (M{{Collective::kAllReduce, 1}}));
  o.tp = 1;
  EXPECT_TRUE(count(layer_ops(seq, 0, o), false).empty());
}

TEST(OpGraph, AttendedKeys) {
  EXPECT_DOUBLE_EQ(attended_keys(2048, 0), 1024.5);
  EXPECT_DOUBLE_EQ(attended_keys(2048, 4096), 1024.5);
  EXPECT_DOUBLE_EQ(attended_keys(4, 2), (1 + 2 + 2 + 2) / 4.0);
  EXPECT_NEAR(attended_keys(1 << 20, 1024) / 1024, 1.0, 1e-3);
  ms::testing::expect_error([] { layer_ops(gpt(BlockKind::kSequential, AttentionKind::kFull), 0, OpGraphOptions{}); },
                            {"seq 0"});
}

}  // namespace
