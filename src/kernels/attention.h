// attention: causal multi-head self-attention, flash-style (FlashAttention-2 on the CPU).
// Queries and keys are processed in 64-row tiles with an online softmax, so the TxT score matrix is
// never materialised (extra memory: O(T*HS) scratch per thread). An optional sliding window W
// restricts query t to keys max(0, t-W+1)..t, and key tiles entirely outside the window are
// skipped, so the cost grows as T*W instead of T*T/2.
// Grouped-query attention: NKV key/value heads serve NH query heads (NH a multiple of NKV; query head
// h uses key/value head h / (NH/NKV), Hugging Face's repeat_kv; NKV = 1: multi-query; NKV = NH:
// multi-head, the same bits as before grouped queries existed).
// Guarantees: results are bit-identical for any number of OpenMP threads (each (b, h, query tile)
// of the forward and each (b, key/value head) of the backward, with its query heads in order, is
// computed by one thread in a fixed order). The
// hot loops use AVX-512 when the CPU has it and the baseline x86-64-v2 path otherwise; setting the
// environment variable MS_KERNEL_ISA=generic (read once) forces the baseline path everywhere in
// the fused kernels (layernorm, gelu, attention, cross_entropy), e.g. to reproduce results of a
// machine without AVX-512. No heap allocation after the first call (per-thread scratch, grown once).
#pragma once

namespace ms {

// qkv (B,T,C+2*NKV*HS), HS = C/NH: query head h at channels [h*HS,(h+1)*HS), key head g at
// C + [g*HS,(g+1)*HS), value head g at C + NKV*HS + [g*HS,(g+1)*HS) (with NKV = NH: q = [0,C),
// k = [C,2C), v = [2C,3C)). Scores are scaled by 1/sqrt(HS).
// window == 0: full causal (t attends 0..t); window = W > 0: t attends max(0,t-W+1)..t.
// out (B,T,C) with head h at channels [h*HS,(h+1)*HS); lse (B,NH,T) = log-sum-exp of the scaled
// scores of each query row, saved for the backward.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV, int window);

// dqkv (B,T,C+2*NKV*HS) is OVERWRITTEN with the gradient wrt qkv, given dout (B,T,C) and the
// forward's qkv, out and lse; a key/value head's gradient sums its NH/NKV query heads' in head
// order. Probabilities are recomputed from lse (FlashAttention-2 backward, D_i = rowsum(dout_i *
// out_i)). Parallel over (b, key/value head), so the writes are disjoint.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, int NKV, int window);

// The same on the bf16 dot-product units (train.precision=bf16): every tile product (Q K^T and P V
// forward; Q K^T, dO V^T, P^T dO, dS K, dS^T Q backward) takes bf16 operands (Q, K, V, dout, the
// probabilities P and dS rounded to nearest even) with exact products accumulated in fp32 on
// AVX512-BF16 (vdpbf16ps); the scores, the online softmax, lse and D stay fp32, and the softmax
// denominator sums the rounded probabilities the product uses. Interfaces and guarantees as above
// (bit-identical for any thread count, window tiles skipped); parallel over (b, h) forward and
// (b, key/value head) backward. Error against fp32: that of bf16 operands (relative ~1e-2 per product, averaged over
// HS or T terms). On a CPU without AVX512-BF16 (or with MS_KERNEL_ISA=generic) these run the fp32
// kernels above. AMX tiles are not used here (the GEMMs of the linear layers use them via oneDNN).
void attention_forward_bf16(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV,
                            int window);
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int B, int T, int C, int NH, int NKV, int window);
// True when the two above run on AVX512-BF16 (false: they fall back to fp32).
bool attention_bf16_on_dot_product_units();

}  // namespace ms
