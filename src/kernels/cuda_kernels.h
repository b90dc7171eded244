// cuda_kernels: the CUDA implementations of the kernel entries (src/kernels/cuda/*.cu), beside the
// CPU ones: the same names and arguments as matmul.h, gemm_bf16.h, layernorm.h, gelu.h,
// cross_entropy.h, bf16_convert.h and attention.h, in namespace ms::cuda, with every pointer a DEVICE pointer
// and a last argument, the stream the work is enqueued on (asynchronous: nothing here waits for
// the device unless it says so). Plus the embedding's forward/backward and the AdamW update,
// which have no kernel header on the CPU side yet (the model and optim hold those loops).
// Built only with MEGASCALE_WITH_CUDA; tests/kernels/test_cuda_kernels.cpp checks every entry
// against its CPU kernel.
// Guarantees:
//  - GEMMs go through cuBLASLt with CUBLAS_COMPUTE_32F: fp32 GEMMs are true fp32 (no TF32), bf16
//    GEMMs have fp32 accumulation and fp32 output; the bias is a cuBLASLt epilogue. One plan
//    (descriptors + the heuristic's first algorithm) is cached per shape, one 32 MiB workspace:
//    the same shape always runs the same algorithm, so results repeat bit for bit.
//  - No atomics anywhere: every reduction (bias, LayerNorm weight, embedding gradients, loss) has
//    a fixed order, so the same inputs give the same bits on every run.
//  - Elementwise arithmetic is compiled without fma contraction (--fmad=false), like the CPU.
//  - Scratch (the column-sum partials, the GEMM workspace) is device memory grown on first use and
//    kept: no device allocation after warm-up (base/device.h counts them).
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

// ---- layernorm.cu, gelu.cu, cross_entropy.cu: as their CPU headers ----
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, Stream s);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, Stream s);
void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int C, Stream s);
void bias_gelu_forward_bf16(bf16_t* out, float* pre, const float* bias, int N, int C, Stream s);
void bias_gelu_backward(float* dpre, float* dbias, const float* dout, const float* pre, int N, int C, Stream s);
void softmax_cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits,
                                            const int* targets, int N, int V, int Vp, float dloss, Stream s);
void softmax_cross_entropy_forward_backward_bf16(float* losses, bf16_t* dlogits_bf16, const float* logits,
                                                 const int* targets, int N, int V, int Vp, float dloss, Stream s);

// ---- elementwise.cu: bf16 conversion (exact RNE, as base/bf16.h, NaN kept quiet) and AdamW ----
void f32_to_bf16(bf16_t* out, const float* in, size_t n, Stream s);
void bf16_to_f32(float* out, const bf16_t* in, size_t n, Stream s);
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

// ---- attention.cu: as attention.h (same layouts, band, lse; dqkv OVERWRITTEN) ----
// FlashAttention-2 style: 64x64 tiles, online softmax, key tiles outside the sliding window never
// loaded; backward in two kernels (dK/dV per key tile, dQ per query tile): no atomics, the same
// bits on every run. fp32 on CUDA-core FMAs; the _bf16 forms round every tile product's operands
// (Q, K, V, dout, P, dS) to bf16 with fp32 accumulation, as the CPU's. Head size C/NH <= 128.
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int window, Stream s);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int B, int T, int C, int NH, int window, Stream s);
void attention_forward_bf16(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int window,
                            Stream s);
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             int B, int T, int C, int NH, int window, Stream s);

}  // namespace ms::cuda
