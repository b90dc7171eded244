// model_math: the published closed forms the planner is built on, for a GPT of l layers, hidden h,
// a heads, sequence s and vocabulary V:
//  - parameters (Narayanan et al., SC21 eq. 2): P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h));
//  - model FLOPs per token, forward + backward, no recomputation, full s x s attention (Korthikanti
//    et al., MLSys'23 eq. 7): F = 72 l h^2 (1 + s/(6h) + V/(12 l h)) — the numerator of Megatron-LM's
//    MFU (convention "megatron-72"; model/flops.h counts the causal keys actually attended instead);
//  - activation memory of one transformer layer for one micro-batch of b sequences, in bytes (16-bit
//    activations; Korthikanti §4): no sequence parallelism s b h (10 + 24/t + 5 a s/(h t)); with it
//    s b h/t (34 + 5 a s/h); selective recomputation (or FlashAttention) drops the 5 a s/h term;
//    full recomputation keeps only the layer's input, 2 s b h (/t with sequence parallelism).
// Pure arithmetic in doubles; unit-tested against the papers' published numbers.
#pragma once
#include "config/model_config.h"  // ModelConfig

namespace ms::plan {

struct GptShape {
  int layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
};
// The shape of the trainer's [model] section at sequence length seq.
GptShape shape_of(const ModelConfig& m, int seq);

double megatron_params(const GptShape& m);
double megatron_flops_per_token(const GptShape& m);

enum class Recompute { kNone, kSelective, kFull };

// Bytes of one layer's saved activations for one micro-batch of b sequences on one of t
// tensor-parallel ranks.
double layer_activation_bytes(const GptShape& m, int b, int t, bool sequence_parallel, Recompute r);

}  // namespace ms::plan
