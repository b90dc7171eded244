// cuda_kernels: the CUDA implementations of the kernel entries (src/kernels/cuda/*.cu), beside the
// CPU ones: the same names and arguments as matmul.h, gemm_bf16.h, layernorm.h, rmsnorm.h, gelu.h,
// swiglu.h, rope.h, cross_entropy.h, bf16_convert.h and attention.h (with backend.h's NKV), in
// namespace ms::cuda, with every pointer a DEVICE pointer and a last argument, the stream the work
// is enqueued on (asynchronous: nothing here waits for the device unless it says so);
// vocab_parallel_cross_entropy.h's three phases likewise. Plus the
// embedding entries (backend.h's lookup / position add / backward, and the whole forward/backward),
// fill and scale, and the optimizer's arithmetic (optim/adamw.h, optim/lamb.h, the double sum of
// squares of optim/grad_norm.h), which have no kernel header on the CPU side (the model and optim
// hold those loops; backend_cuda.cpp and optim_kernels_cuda.cpp put them behind backend.h and
// optim_kernels.h).
// Built only with MEGASCALE_WITH_CUDA; tests/kernels/test_cuda_kernels.cpp (with the files of
// test_cuda_kernels/) checks every entry against its CPU kernel.
// Guarantees:
//  - GEMMs go through cuBLASLt with CUBLAS_COMPUTE_32F: fp32 GEMMs are true fp32 (no TF32), bf16
//    GEMMs have fp32 accumulation and fp32 output; the bias is a cuBLASLt epilogue. One plan
//    (descriptors + the heuristic's first algorithm) is cached per shape, one 32 MiB workspace:
//    the same shape always runs the same algorithm, so results repeat bit for bit.
//  - No atomics anywhere: every reduction (bias, LayerNorm / RMSNorm weight, embedding gradients,
//    grouped-query dK/dV, loss, sums of squares) has a fixed order, so the same inputs give the
//    same bits on every run.
//  - Elementwise arithmetic is compiled without fma contraction (--fmad=false), like the CPU.
//  - Scratch (the column-sum partials, the GEMM workspace, the sum-of-squares partials) is device
//    memory grown on first use and kept: no device allocation after warm-up (base/device.h counts
//    them).
//  - Errors: every CUDA / cuBLASLt call is checked and throws ms::Error naming file:line and the
//    call. Token ids are NOT validated here (they are on the device): callers validate on the host
//    first, as the CPU kernels do; an id outside its range gives a NaN loss / is skipped, never an
//    out-of-bounds access.
#pragma once
#include <cstddef>  // size_t

#include "base/bf16.h"    // bf16_t
#include "base/device.h"  // Stream

namespace ms::cuda {

// ---- GEMM (gemm.cu) ----
// Row-major C (M,N) = op(A) @ op(B) [+ bias (N)] [+ C if accumulate]; as gemm_bf16.h.
void gemm_f32(bool transA, bool transB, int M, int N, int K, const float* A, const float* B,
              const float* bias, float* C, bool accumulate, Stream s);
void gemm_bf16(bool transA, bool transB, int M, int N, int K, const bf16_t* A, const bf16_t* B,
               const float* bias, float* C, bool accumulate, Stream s);
// matmul.h / gemm_bf16.h's linear layer (weight (OC,C), out = inp @ weight^T + bias).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, bool accumulate, Stream s);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, bool accumulate_dinp, Stream s);
void matmul_forward_bf16(float* out, const bf16_t* inp, const bf16_t* weight, const float* bias,
                         int N, int C, int OC, bool accumulate, Stream s);
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout,
                          bf16_t* dout_bf16, const bf16_t* inp, const bf16_t* weight, int N, int C,
                          int OC, bool accumulate_dinp, Stream s);
void matmul_backward_bf16_from_bf16(float* dinp, float* dweight, const bf16_t* dout_bf16,
                                    const bf16_t* inp, const bf16_t* weight, int N, int C, int OC,
                                    bool accumulate_dinp, Stream s);
// out (C) += column sums of x (N,C): fixed 32-row chunks summed in order (reduce.cu).
void add_column_sums(float* out, const float* x, int N, int C, Stream s);
int gemm_cached_plans();  // cached cuBLASLt plans (for tests: constant after warm-up)

// ---- layernorm.cu, rmsnorm.cu, gelu.cu, swiglu.cu, rope.cu, cross_entropy.cu: as their CPU headers ----
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps, Stream s);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, Stream s);
// rmsnorm.h: one warp per row; dinp and dweight ACCUMULATED (+=), dweight over fixed 32-row chunks
// summed in order (the CPU's order, so dweight differs from the CPU's only through rstd's bits).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     Stream s);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, Stream s);
void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int C, Stream s);
void bias_gelu_forward_bf16(bf16_t* out, float* pre, const float* bias, int N, int C, Stream s);
void bias_gelu_backward(float* dpre, float* dbias, const float* dout, const float* pre, int N, int C, Stream s);
// swiglu.h: pre (N, 2F) rows [gate | up]; out (N, F) = silu(gate) * up (fp32, or bf16 rounded to
// nearest even); dpre (N, 2F) OVERWRITTEN with [dout * up * silu'(gate) | dout * silu(gate)]. The
// CPU's expressions in its order, sigmoid through expf (the CPU's vector exp differs by <= ~2 ulp).
void swiglu_forward(float* out, const float* pre, int N, int F, Stream s);
void swiglu_forward_bf16(bf16_t* out, const float* pre, int N, int F, Stream s);
void swiglu_backward(float* dpre, const float* dout, const float* pre, int N, int F, Stream s);
// rope.h: rows [lo, hi) of qkv (rows of (NH + 2*NKV)*HS floats), the NH query and NKV key heads
// rotated in place (rotate_half pairs i, i + HS/2; values untouched); cos, sin: rope_table's (T, HS/2)
// tables in DEVICE memory; row r at position r % T. backward: the inverse rotation (sin negated).
// The CPU's arithmetic element for element (no fma): the same bits.
void rope_forward(float* qkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV, int HS,
                  Stream s);
void rope_backward(float* dqkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV, int HS,
                   Stream s);
void softmax_cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits,
                                            const int* targets, int N, int V, int Vp, float dloss, Stream s);
void softmax_cross_entropy_forward_backward_bf16(float* losses, bf16_t* dlogits_bf16, const float* logits,
                                                 const int* targets, int N, int V, int Vp, float dloss, Stream s);

// ---- vocab_cross_entropy.cu: vocab_parallel_cross_entropy.h's phases, one block per row ----
// Same arguments and results (targets NOT validated: the caller checks them on the host); the
// sum of exp is a float per thread added in double over a fixed tree (deterministic).
void vocab_shard_row_max(float* row_max, const float* logits, const int* targets, int N, int V, int Vl, int v0,
                         Stream s);
void vocab_shard_sum_exp(float* sums, const float* logits, const float* row_max, const int* targets, int N, int V,
                         int Vl, int v0, Stream s);
// dlogits (N, Vl) may alias logits; with dloss == 0 only the losses are written (as the CPU).
void vocab_shard_loss_grad(float* losses, float* dlogits, const float* logits, const float* row_max,
                           const float* sums, const int* targets, int N, int V, int Vl, int v0, float dloss,
                           Stream s);
void vocab_shard_loss_grad_bf16(float* losses, bf16_t* dlogits, const float* logits, const float* row_max,
                                const float* sums, const int* targets, int N, int V, int Vl, int v0, float dloss,
                                Stream s);

// ---- elementwise.cu: bf16 conversion (exact RNE, as base/bf16.h, NaN kept quiet), fill, scale, AdamW ----
void f32_to_bf16(bf16_t* out, const float* in, size_t n, Stream s);
void bf16_to_f32(float* out, const bf16_t* in, size_t n, Stream s);
// out[i] += in[i].
void add(float* out, const float* in, size_t n, Stream s);
// A kernel of one thread that holds stream s for `ms` milliseconds (tests of stream ordering).
void spin(double ms, Stream s);
// x[i] = value; x[i] *= s_ (nothing when s_ == 1, as optim/grad_norm.h's scale_inplace).
void fill(float* x, size_t n, float value, Stream s);
void scale(float* x, size_t n, float s_, Stream s);
// optim/adamw.h's update for ONE tensor of n elements (decay: weight decay applies), with the same
// scalars formed on the host in double as the CPU does; grad_scale, bf16_out (may be nullptr) and
// zero_grads as there. The arithmetic is the CPU's, step by step (explicit fmaf where it has fma).
void adamw_update(float* params, float* grads, float* m, float* v, size_t n, bool decay, float lr,
                  int t, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  bf16_t* bf16_out, bool zero_grads, Stream s);

// ---- embedding.cu ----
// out (B*T, C) = wte[ids[i]] + wpe[i % T] (ids in [0, V); others give a zero token row).
void embedding_forward(float* out, const int* ids, const float* wte, const float* wpe, int B, int T,
                       int C, int V, Stream s);
// dwte (V,C) += sum of dout rows per token id, dwpe (T,C) += sum of dout rows per position, both
// in ascending row order (the CPU model's order: the same bits). No atomics.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* ids, int B, int T,
                        int C, int V, Stream s);
// backend.h's forms. Rows [lo, hi) of out (., C) = wte[ids[i] - v0] (wte holds rows [v0, v1)) when
// v0 <= ids[i] < v1, else zeros.
void embedding_lookup(float* out, const int* ids, const float* wte, int lo, int hi, int C, int v0, int v1,
                      Stream s);
// out (n, C) += wpe[(row0 + i) % T] for row i.
void add_position_embedding(float* out, const float* wpe, int n, int C, int T, int row0, Stream s);
// dwpe[(row0 + i) % T] += d_local[i] for i < n; dwte[ids[i] - v0] += d_full[i] for i < N with
// v0 <= ids[i] < v1; every element summed in ascending row order (the CPU's bits). Either
// gradient may be nullptr (skipped).
void embedding_backward_rows(float* dwte, float* dwpe, const float* d_full, const float* d_local, const int* ids,
                             int N, int n, int C, int T, int row0, int v0, int v1, Stream s);

// ---- attention.cu: as attention.h (same band, lse; dqkv OVERWRITTEN) with grouped-query heads ----
// C = NH*HS query channels, NKV key/value heads (NH a multiple of NKV; NKV == NH: multi-head, the
// same bits as before NKV existed): qkv and dqkv rows (NH + 2*NKV)*HS wide, query heads at
// [0, NH*HS), key heads at [NH*HS, (NH+NKV)*HS), value heads after; query head h reads kv head
// h / (NH/NKV). out (B,T,C), lse (B,NH,T).
// FlashAttention-2 style: 64x64 tiles, online softmax, key tiles outside the sliding window never
// loaded; backward in two kernels (dK/dV per key tile and kv head, summing its NH/NKV query heads in
// ascending order in registers; dQ per query tile): no atomics, the same bits on every run. fp32 on
// CUDA-core FMAs; the _bf16 forms round every tile product's operands (Q, K, V, dout, P, dS) to bf16
// with fp32 accumulation, as the CPU's. Head size C/NH <= 128.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV, int window,
                       Stream s);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int B, int T, int C, int NH, int NKV, int window, Stream s);
void attention_forward_bf16(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV,
                            int window, Stream s);
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             int B, int T, int C, int NH, int NKV, int window, Stream s);

// ---- optim.cu: optim/lamb.h for ONE tensor, and sums of squares (double, deterministic) ----
// Phase 1: m, v as adamw_update's moments; update = r = (m/bc1) / (sqrt(v)/sqrt(bc2) + eps)
// (+ weight_decay * p when decay and weight_decay != 0; bc = 1 without bias_correction), in
// lamb.cpp's float operation order (fmaf where it has std::fma). Writes (not adds) the double sums
// of squares of the params (before any update) to *w_sq and of r to *r_sq: DEVICE pointers.
// Throws a named ms::Error unless t >= 1, betas in [0, 1) and eps > 0.
void lamb_compute_update(const float* params, const float* grads, float* m, float* v, float* update, size_t n,
                         bool decay, int t, float beta1, float beta2, float eps, float weight_decay,
                         bool bias_correction, double* w_sq, double* r_sq, Stream s);
// Phase 2: params[i] = params[i] - step * update[i] (step = lr * trust, formed on the host).
void lamb_apply_update(float* params, const float* update, size_t n, float step, Stream s);
// *out (a DEVICE double) = sum of x[i]^2 in double: a grid of a size fixed by n writes one partial
// per block, then one block adds them in a fixed order (the same bits every run; 0 when n == 0).
void sum_squares(const float* x, size_t n, double* out, Stream s);

}  // namespace ms::cuda
