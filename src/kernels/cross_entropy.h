// cross_entropy: fused softmax + cross-entropy over a (padded) vocabulary, forward and backward in
// one pass over each row (like llm.c's fused classifier): the gradient can overwrite the logits.
// Guarantees: each row is computed by one thread, so results are bit-identical for any number of
// OpenMP threads. The log-sum-exp is accumulated in 1024-column float blocks summed in double.
// Padded columns (>= V) never affect the loss and get zero gradient. AVX-512 when available
// (MS_KERNEL_ISA=generic forces the baseline path, see attention.h). No heap allocation.
#pragma once
#include "base/bf16.h"  // bf16_t

namespace ms {

// logits (N,Vp): only the first V columns are real. targets (N): ids in [0,V), or -1 = ignored
// row (loss 0, gradient 0); anything else throws ms::Error before any work.
// losses[i] = -log softmax(logits[i,:V])[targets[i]].
// If dlogits != nullptr: dlogits[i,j] = dloss * (softmax_j - [j==target]) for j<V, 0 for j>=V.
// dlogits MAY ALIAS logits (in place). dloss is the weight of each row's loss in the total (e.g.
// 1/N for a mean).
void softmax_cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits,
                                            const int* targets, int N, int V, int Vp, float dloss);

// The same with the gradient written as bf16 (the fp32 value above rounded to nearest even, exact:
// bf16.h f32_to_bf16_rne) into dlogits_bf16 (N,Vp), for a bf16 LM-head backward: no fp32 gradient
// pass and no conversion pass. logits are left unchanged. Uses a per-thread row of Vp floats.
void softmax_cross_entropy_forward_backward_bf16(float* losses, bf16_t* dlogits_bf16, const float* logits,
                                                 const int* targets, int N, int V, int Vp, float dloss);

}  // namespace ms
