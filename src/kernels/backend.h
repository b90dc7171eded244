// backend: one interface over every kernel the model runs (ggml's "backends behind one
// interface"), so that the model holds no device code: cpu_kernels() forwards to the CPU kernels of
// the headers beside this one (bit for bit the calls the model made before), cuda_kernels() to
// their CUDA implementations (cuda_kernels.h) on one stream. Every pointer is memory of the
// backend's device(), except where an argument says "host".
// Beyond the kernel headers it holds the loops the model used to run itself: the embedding lookup
// and its backward (deterministic, no atomics on either device), the residual copies and fills,
// and the mean of the per-row losses (the one read back to the host per micro-batch).
// Guarantees: the CPU backend gives exactly the bits of the kernel headers (it only forwards), and
// its new entries the bits of the model's former loops; work on the CUDA backend is enqueued on its
// stream in call order (asynchronous) except masked_loss_mean, which waits for the stream and is the
// only host synchronisation of a forward; a build without MEGASCALE_WITH_CUDA links, and
// cuda_kernels() then throws an ms::Error naming the build option.
#pragma once
#include <cstddef>  // size_t

#include "base/bf16.h"    // bf16_t
#include "base/device.h"  // Device, Stream

namespace ms {

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual Device device() const = 0;
  virtual Stream stream() const { return {}; }

  // ---- GEMMs (matmul.h, gemm_bf16.h): row-major, natural leading dimensions ----
  // C (M,N) = op(A) @ op(B) (+= C when accumulate); sgemm with alpha 1, beta accumulate ? 1 : 0.
  virtual void gemm_f32(bool transA, bool transB, int M, int N, int K, const float* A, const float* B, float* C,
                        bool accumulate) = 0;
  virtual void gemm_bf16(bool transA, bool transB, int M, int N, int K, const bf16_t* A, const bf16_t* B,
                         float* C, bool accumulate) = 0;
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                              int OC, bool accumulate) = 0;
  virtual void matmul_forward_bf16(float* out, const bf16_t* inp, const bf16_t* weight, const float* bias, int N,
                                   int C, int OC, bool accumulate) = 0;
  virtual void add_column_sums(float* out, const float* x, int N, int C) = 0;
  virtual void f32_to_bf16(bf16_t* out, const float* in, size_t n) = 0;

  // ---- layernorm.h, rmsnorm.h, gelu.h, swiglu.h, rope.h, attention.h, cross_entropy.h,
  // vocab_parallel_cross_entropy.h ----
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int N, int C, float eps) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, const float* mean, const float* rstd, int N, int C) = 0;
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                               float eps) = 0;
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                const float* rstd, int N, int C) = 0;
  virtual void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int C) = 0;
  virtual void bias_gelu_forward_bf16(bf16_t* out, float* pre, const float* bias, int N, int C) = 0;
  virtual void bias_gelu_backward(float* dpre, float* dbias, const float* dout, const float* pre, int N, int C) = 0;
  virtual void swiglu_forward(float* out, const float* pre, int N, int F) = 0;
  virtual void swiglu_forward_bf16(bf16_t* out, const float* pre, int N, int F) = 0;
  virtual void swiglu_backward(float* dpre, const float* dout, const float* pre, int N, int F) = 0;
  // cos, sin: rope_table's (T, HS/2) tables in this device's memory.
  virtual void rope_forward(float* qkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV,
                            int HS) = 0;
  virtual void rope_backward(float* dqkv, const float* cos, const float* sin, int lo, int hi, int T, int NH,
                             int NKV, int HS) = 0;
  // bf16_tiles: attention_forward_bf16 / attention_backward_bf16 instead of the fp32 forms. C = NH*HS
  // query channels; NKV key/value heads (NH a multiple of NKV; NKV == NH: multi-head attention), qkv
  // rows (NH + 2*NKV)*HS wide (attention.h).
  virtual void attention_forward(bool bf16_tiles, float* out, float* lse, const float* qkv, int B, int T, int C,
                                 int NH, int NKV, int window) = 0;
  virtual void attention_backward(bool bf16_tiles, float* dqkv, const float* dout, const float* qkv,
                                  const float* out, const float* lse, int B, int T, int C, int NH, int NKV,
                                  int window) = 0;
  virtual void softmax_cross_entropy(float* losses, float* dlogits, const float* logits, const int* targets, int N,
                                     int V, int Vp, float dloss) = 0;
  virtual void softmax_cross_entropy_bf16(float* losses, bf16_t* dlogits_bf16, const float* logits,
                                          const int* targets, int N, int V, int Vp, float dloss) = 0;
  virtual void vocab_shard_row_max(float* row_max, const float* logits, const int* targets, int N, int V, int Vl,
                                   int v0) = 0;
  virtual void vocab_shard_sum_exp(float* sums, const float* logits, const float* row_max, const int* targets,
                                   int N, int V, int Vl, int v0) = 0;
  virtual void vocab_shard_loss_grad(float* losses, float* dlogits, const float* logits, const float* row_max,
                                     const float* sums, const int* targets, int N, int V, int Vl, int v0,
                                     float dloss) = 0;
  virtual void vocab_shard_loss_grad_bf16(float* losses, bf16_t* dlogits, const float* logits,
                                          const float* row_max, const float* sums, const int* targets, int N, int V,
                                          int Vl, int v0, float dloss) = 0;

  // ---- the model's own loops ----
  // Rows [lo, hi) of out (., C): the token embedding row ids[i] - v0 of wte (Vl rows) when
  // v0 <= ids[i] < v1, else zeros (another vocabulary part holds it).
  virtual void embedding_lookup(float* out, const int* ids, const float* wte, int lo, int hi, int C, int v0,
                                int v1) = 0;
  // out (n, C) += wpe[(row0 + i) % T] for row i.
  virtual void add_position_embedding(float* out, const float* wpe, int n, int C, int T, int row0) = 0;
  // dwpe[(row0 + i) % T] += d_local[i] for i < n (skipped when dwpe is nullptr: no position
  // embedding), and dwte[ids[i] - v0] += d_full[i] for i < N with v0 <= ids[i] < v1; every element
  // summed in ascending row order (deterministic).
  virtual void embedding_backward(float* dwte, float* dwpe, const float* d_full, const float* d_local,
                                  const int* ids, int N, int n, int C, int T, int row0, int v0, int v1) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;
  virtual void fill(float* p, float value, size_t n) = 0;
  // out[i] += in[i] for i < n (one fp32 add each: the same bits on both devices).
  virtual void add(float* out, const float* in, size_t n) = 0;
  // Holds the backend's stream for `ms` milliseconds (CUDA: a spinning kernel; CPU: the host
  // sleeps). Tests of stream ordering insert it before work whose consumers must wait for it.
  virtual void delay(double ms) = 0;
  // The mean over rows i < N with host_targets[i] >= 0 of losses[i] (device memory), summed in row
  // order in double; 0 when no row counts. Reads the losses back: the forward's host sync.
  virtual float masked_loss_mean(const float* losses, const int* host_targets, int N) = 0;
};

// masked_loss_mean's arithmetic on host arrays (every backend's, so the loss has the same bits for
// the same per-row losses).
float masked_loss_mean_host(const float* losses, const int* targets, int N);

// The CPU kernels (one instance per process).
KernelBackend& cpu_kernels();
// The CUDA kernels on the default stream; throws a named ms::Error without MEGASCALE_WITH_CUDA or
// when no device opens (require_device).
KernelBackend& cuda_kernels();
KernelBackend& kernels_for(Device d);

}  // namespace ms
