// op_graph.cpp: see op_graph.h.
#include "plan/op_graph.h"

#include <algorithm>

#include "base/check.h"

namespace ms::plan {

namespace {

PlanOp gemm(const char* name, double m, double n, double k) {
  PlanOp op;
  op.name = name, op.cls = OpClass::kGemm, op.m = m, op.n = n, op.k = k;
  op.fwd_flops = 2.0 * m * n * k;
  op.bwd_flops = 2.0 * op.fwd_flops;  // input gradient + weight gradient
  return op;
}

// `passes` reads/writes of an (rows x width) tensor forward, `bwd_passes` backward.
PlanOp elementwise(const char* name, double rows, double width, double elem_bytes, double passes, double bwd_passes) {
  PlanOp op;
  op.name = name, op.cls = OpClass::kElementwise;
  op.fwd_bytes = passes * rows * width * elem_bytes;
  op.bwd_bytes = bwd_passes * rows * width * elem_bytes;
  return op;
}

PlanOp collective(const char* name, Collective fwd, Collective bwd, double bytes) {
  PlanOp op;
  op.name = name, op.cls = OpClass::kCollective, op.fwd_coll = fwd, op.bwd_coll = bwd, op.coll_bytes = bytes;
  return op;
}

struct Dims {
  double b, s, N, h, t, rows, act;  // rows: the residual stream's rows on this device
  bool sp, tp;
};

Dims dims(const ModelConfig& m, const OpGraphOptions& o) {
  MS_CHECK(o.seq > 0 && o.micro_batch > 0 && o.tp > 0, "plan: seq {}, micro-batch {}, tp {} must be > 0", o.seq,
           o.micro_batch, o.tp);
  MS_CHECK(m.n_head % o.tp == 0, "plan: {} heads do not split over tp {}", m.n_head, o.tp);
  Dims d;
  d.b = o.micro_batch, d.s = o.seq, d.N = d.b * d.s, d.h = m.n_embd, d.t = o.tp, d.act = o.act_bytes;
  d.sp = o.sequence_parallel && o.tp > 1, d.tp = o.tp > 1;
  d.rows = d.sp ? d.N / d.t : d.N;
  return d;
}

// Entering a tensor-parallel region (before its first GEMM) and leaving it (after its last).
void region_in(std::vector<PlanOp>& ops, const Dims& d, const char* name) {
  if (!d.tp) return;
  const double bytes = d.N * d.h * d.act;
  if (d.sp) {
    ops.push_back(collective(name, Collective::kAllGather, Collective::kReduceScatter, bytes));
    ops.push_back(collective("ag-for-wgrad", Collective::kNone, Collective::kAllGather, bytes));
  } else {
    ops.push_back(collective(name, Collective::kNone, Collective::kAllReduce, bytes));
  }
}
void region_out(std::vector<PlanOp>& ops, const Dims& d, const char* name) {
  if (!d.tp) return;
  const double bytes = d.N * d.h * d.act;
  if (d.sp)
    ops.push_back(collective(name, Collective::kReduceScatter, Collective::kAllGather, bytes));
  else
    ops.push_back(collective(name, Collective::kAllReduce, Collective::kNone, bytes));
}

}  // namespace

double attended_keys(int seq, int window) {
  MS_CHECK(seq > 0 && window >= 0, "plan: attended keys of seq {} window {}", seq, window);
  const double s = seq, w = window;
  if (window == 0 || window >= seq) return (s + 1.0) / 2.0;
  return (w * (w + 1.0) / 2.0 + (s - w) * w) / s;  // the first w queries see t+1 keys, the rest w
}

std::vector<PlanOp> layer_ops(const ModelConfig& m, int layer, const OpGraphOptions& o) {
  const Dims d = dims(m, o);
  const double N = d.N, h = d.h, t = d.t, a = m.n_head;
  const bool unfused = o.attention == AttentionImpl::kUnfused;
  // Unfused (Megatron's kernels) computes every score of the query's span, masked: all s keys under
  // full attention, a band of w keys under a sliding window (MegaScale's SWA needs a banded kernel to
  // save anything); FlashAttention computes only the keys attended.
  const int w = m.layer_window(layer);
  const double keys = unfused ? (w > 0 && w < o.seq ? w : d.s) : attended_keys(o.seq, w);
  std::vector<PlanOp> ops;
  ops.push_back(elementwise("ln1", d.rows, h, d.act, 2, 3));
  region_in(ops, d, m.parallel_block() ? "block-in" : "attn-in");  // parallel: one region feeds QKV and FC1
  ops.push_back(gemm("qkv", N, 3 * h / t, h));
  PlanOp att;
  att.name = unfused ? "attention" : "flash-attention", att.cls = OpClass::kAttention;
  att.m = N, att.n = d.s, att.k = h / t;   // rows, sequence length, width per device
  att.fwd_flops = 4.0 * N * keys * h / t;  // Q K^T and P V
  att.bwd_flops = (unfused ? 2.0 : 2.5) * att.fwd_flops;
  if (unfused) {  // Megatron's kernels over the b (a/t) s keys scores, each a pass over memory:
    // forward: the batched GEMM writes the scores, the fused scale-mask-softmax reads and writes them,
    // dropout (Megatron's default attention dropout) reads them and writes them and its 1-byte mask,
    // the second batched GEMM reads them: 6 passes and the mask. Backward: the gradient of the
    // probabilities written, dropout's backward (it, the mask, its output), the softmax's (the
    // gradient, the probabilities, its output), the dQ and dK GEMMs reading the scores' gradient and
    // the dV GEMM reading the kept probabilities: 9 passes and the mask.
    const double scores = d.b * (a / t) * d.s * keys;  // a band of keys under a banded kernel
    att.fwd_bytes = scores * (6 * d.act + 1), att.bwd_bytes = scores * (9 * d.act + 1);
  }
  ops.push_back(att);
  if (m.parallel_block()) {
    ops.push_back(gemm("fc1", N, 4 * h / t, h));  // with qkv: one GEMM of width 7h/t in MegaScale
    ops.push_back(elementwise("gelu", N, 4 * h / t, d.act, 2, 3));
    ops.push_back(gemm("proj", N, h, h / t));
    ops.push_back(gemm("fc2", N, h, 4 * h / t));
    region_out(ops, d, "block-out");
    ops.push_back(elementwise("residual", d.rows, h, d.act, 4, 3));  // y = x + attn + mlp
    return ops;
  }
  ops.push_back(gemm("proj", N, h, h / t));
  region_out(ops, d, "attn-out");
  ops.push_back(elementwise("residual1", d.rows, h, d.act, 3, 3));
  ops.push_back(elementwise("ln2", d.rows, h, d.act, 2, 3));
  region_in(ops, d, "mlp-in");
  ops.push_back(gemm("fc1", N, 4 * h / t, h));
  ops.push_back(elementwise("gelu", N, 4 * h / t, d.act, 2, 3));
  ops.push_back(gemm("fc2", N, h, 4 * h / t));
  region_out(ops, d, "mlp-out");
  ops.push_back(elementwise("residual2", d.rows, h, d.act, 3, 3));
  return ops;
}

std::vector<PlanOp> embedding_ops(const ModelConfig& m, const OpGraphOptions& o) {
  const Dims d = dims(m, o);
  std::vector<PlanOp> ops;
  ops.push_back(elementwise("embedding", d.N, d.h, d.act, 2, 2));  // row gather; scatter-add back
  region_out(ops, d, "embedding-out");  // the vocabulary-parallel lookup's partial rows summed
  ops.push_back(elementwise("positions", d.rows, d.h, d.act, 3, 2));
  return ops;
}

std::vector<PlanOp> head_ops(const ModelConfig& m, const OpGraphOptions& o) {
  const Dims d = dims(m, o);
  const double V = m.vocab_size;
  std::vector<PlanOp> ops;
  ops.push_back(elementwise("ln_f", d.rows, d.h, d.act, 2, 3));
  region_in(ops, d, "head-in");
  ops.push_back(gemm("head", d.N, V / d.t, d.h));
  // Vocabulary-parallel cross-entropy over fp32 logits: max, sum of exponentials and the loss
  // (3 passes), the gradient written in place (2); two all-reduces of N floats over the group.
  ops.push_back(elementwise("cross-entropy", d.N, V / d.t, 4, 3, 2));
  if (d.tp) ops.push_back(collective("ce-stats", Collective::kAllReduce, Collective::kNone, 2 * d.N * 4));
  return ops;
}

double executed_flops(const std::vector<PlanOp>& ops) {
  double f = 0;
  for (const PlanOp& op : ops) f += op.fwd_flops + op.bwd_flops;
  return f;
}

}  // namespace ms::plan
