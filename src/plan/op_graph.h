// op_graph: the operations one device runs for one micro-batch of b sequences of s tokens
// (N = b s rows), per transformer layer and for the stage extras (planner.md §4.1), read from the
// same [model] section the trainer uses: GEMMs with their shapes and FLOPs, the attention core,
// element-wise passes with their memory traffic, and the tensor-parallel collectives with their
// bytes. FLOPs are EXECUTED FLOPs: the unfused attention (Megatron's) computes all s x s scores and
// its backward is 2x its forward; FlashAttention computes only the keys each query attends
// (causal: (s+1)/2 on average, fewer with a window, model.layer_window) and its backward, which
// recomputes the probabilities, is 2.5x; GEMMs' backward is 2x (input and weight gradients).
// The unfused core's memory traffic is its passes over the scores: 6 of the activations' dtype and
// a 1-byte dropout mask forward, 9 and the mask backward (Megatron's softmax and default dropout).
// Tensor parallelism t: heads, MLP width and vocabulary split t ways; with sequence parallelism
// the LayerNorms run on N/t rows and each region is entered by an all-gather and left by a
// reduce-scatter of N h activations (backward: swapped, plus the all-gather again for the weight
// gradient); without it, an all-reduce of the same bytes. The parallel block (MegaScale) has one
// LayerNorm and one region per layer instead of two. Pure arithmetic.
#pragma once
#include <string>
#include <vector>

#include "config/model_config.h"  // ModelConfig

namespace ms::plan {

enum class OpClass { kGemm, kAttention, kElementwise, kCollective };
enum class Collective { kNone, kAllGather, kReduceScatter, kAllReduce };
enum class AttentionImpl { kUnfused, kFlash };

struct PlanOp {
  std::string name;  // "ln1", "qkv", "attention", "proj", "fc1", "gelu", "fc2", "head", ...
  OpClass cls = OpClass::kGemm;
  double fwd_flops = 0, bwd_flops = 0;  // executed, per device
  double m = 0, n = 0, k = 0;           // GEMM: forward shape per device (rows, outputs, inputs);
                                        // attention: rows, sequence length, width per device
  double fwd_bytes = 0, bwd_bytes = 0;  // element-wise / unfused softmax: memory traffic
  Collective fwd_coll = Collective::kNone, bwd_coll = Collective::kNone;
  double coll_bytes = 0;  // the collective's total message (all ranks' parts), bytes
};

struct OpGraphOptions {
  int seq = 0;          // s (train.seq_len)
  int micro_batch = 1;  // b
  int tp = 1;           // t
  bool sequence_parallel = false;
  AttentionImpl attention = AttentionImpl::kFlash;
  int act_bytes = 2;  // activation element size (2: bf16/fp16, 4: fp32)
};

// Average keys a query attends in a layer with window W (0: full causal) over s positions.
double attended_keys(int seq, int window);
// Layer l (its window from the config).
std::vector<PlanOp> layer_ops(const ModelConfig& m, int layer, const OpGraphOptions& o);
// The first stage's embedding (lookup, positions) and the last stage's final LayerNorm, LM head and
// vocabulary-parallel cross-entropy (the real vocabulary; padded columns cost nothing).
std::vector<PlanOp> embedding_ops(const ModelConfig& m, const OpGraphOptions& o);
std::vector<PlanOp> head_ops(const ModelConfig& m, const OpGraphOptions& o);
// Forward + backward FLOPs of a list.
double executed_flops(const std::vector<PlanOp>& ops);

}  // namespace ms::plan
