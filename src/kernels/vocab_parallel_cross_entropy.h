// vocab_parallel_cross_entropy: softmax + cross-entropy when the vocabulary is split over ranks
// (Megatron's vocab-parallel cross-entropy): a rank holds the logits of columns [v0, v0 + Vl) of
// the padded vocabulary for every row, so the full B*T x V logits never exist on one rank. Three
// phases, with the caller's reductions over the ranks between them:
//   1. vocab_shard_row_max           local row maxima          -> caller: element-wise max
//   2. vocab_shard_sum_exp           local sum of exp(x - max) and the target's logit (if held here)
//                                                              -> caller: element-wise sum
//   3. vocab_shard_loss_grad[_bf16]  per-row loss and dloss * (softmax - onehot) for local columns
// Only real columns (global id < V) count: of the Vl local columns the first `valid` =
// clamp(V - v0, 0, Vl) are real; padded ones never affect the loss and get zero gradient.
// Guarantees as cross_entropy.h: each row by one thread (bit-identical for any thread count), the
// exp sum accumulated in 1024-column float blocks summed in double, AVX-512 when available, no heap
// allocation. Targets: ids in [0, V) or -1 (ignored row: loss 0, gradient 0), checked in phase 1.
#pragma once
#include "base/bf16.h"  // bf16_t

namespace ms {

// row_max (N) = max over the real local columns of each row of logits (N, Vl); -inf when none.
void vocab_shard_row_max(float* row_max, const float* logits, const int* targets, int N, int V, int Vl, int v0);

// sums (N, 2): [i][0] = sum of exp(logit - row_max[i]) over the real local columns,
// [i][1] = the logit of targets[i] if v0 <= targets[i] < v0 + Vl, else 0.
void vocab_shard_sum_exp(float* sums, const float* logits, const float* row_max, const int* targets, int N, int V,
                         int Vl, int v0);

// losses[i] = log(sums[i][0]) + row_max[i] - sums[i][1] (0 for ignored rows), with sums and
// row_max reduced over the ranks. If dloss != 0, dlogits (N, Vl; may alias logits) =
// dloss * (exp(logit - max) / sum - [column == target]) on real columns, 0 on padded ones.
void vocab_shard_loss_grad(float* losses, float* dlogits, const float* logits, const float* row_max,
                           const float* sums, const int* targets, int N, int V, int Vl, int v0, float dloss);
// The same with the gradient written as bf16 (rounded to nearest even); logits are unchanged.
void vocab_shard_loss_grad_bf16(float* losses, bf16_t* dlogits, const float* logits, const float* row_max,
                                const float* sums, const int* targets, int N, int V, int Vl, int v0, float dloss);

}  // namespace ms
