// backend.cpp: the CPU KernelBackend (backend.h): every kernel entry forwards to the CPU kernel of
// its header with the same arguments; the model's former loops (embedding, copies, the loss mean)
// are here as they were in model/gpt_*.cpp, so the bits do not change.
#include "kernels/backend.h"

#include <chrono>
#include <thread>

#include <algorithm>  // std::fill, std::min
#include <cstring>    // std::memcpy

#include "base/check.h"  // MS_CHECK
#include "kernels/attention.h"
#include "kernels/bf16_convert.h"
#include "kernels/cross_entropy.h"
#include "kernels/gelu.h"
#include "kernels/gemm_bf16.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/vocab_parallel_cross_entropy.h"

namespace ms {
namespace {

class CpuKernels final : public KernelBackend {
 public:
  Device device() const override { return Device::kCpu; }

  void gemm_f32(bool tA, bool tB, int M, int N, int K, const float* A, const float* B, float* C,
                bool accumulate) override {
    sgemm(tA, tB, M, N, K, 1.0f, A, tA ? M : K, B, tB ? K : N, accumulate ? 1.0f : 0.0f, C, N);
  }
  void gemm_bf16(bool tA, bool tB, int M, int N, int K, const bf16_t* A, const bf16_t* B, float* C,
                 bool accumulate) override {
    ms::gemm_bf16(tA, tB, M, N, K, A, B, nullptr, C, accumulate);
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* b, int N, int C, int OC,
                      bool acc) override {
    ms::matmul_forward(out, inp, w, b, N, C, OC, acc);
  }
  void matmul_forward_bf16(float* out, const bf16_t* inp, const bf16_t* w, const float* b, int N, int C, int OC,
                           bool acc) override {
    ms::matmul_forward_bf16(out, inp, w, b, N, C, OC, acc);
  }
  void add_column_sums(float* out, const float* x, int N, int C) override { ms::add_column_sums(out, x, N, C); }
  void f32_to_bf16(bf16_t* out, const float* in, size_t n) override { ms::f32_to_bf16(out, in, n); }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int N, int C, float eps) override {
    ms::layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C) override {
    ms::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C, float eps) override {
    ms::rmsnorm_forward(out, rstd, inp, w, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                        int N, int C) override {
    ms::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
  }
  void swiglu_forward(float* out, const float* pre, int N, int F) override { ms::swiglu_forward(out, pre, N, F); }
  void swiglu_forward_bf16(bf16_t* out, const float* pre, int N, int F) override {
    ms::swiglu_forward_bf16(out, pre, N, F);
  }
  void swiglu_backward(float* dpre, const float* dout, const float* pre, int N, int F) override {
    ms::swiglu_backward(dpre, dout, pre, N, F);
  }
  void rope_forward(float* qkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV,
                    int HS) override {
    ms::rope_forward(qkv, cos, sin, lo, hi, T, NH, NKV, HS);
  }
  void rope_backward(float* dqkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV,
                     int HS) override {
    ms::rope_backward(dqkv, cos, sin, lo, hi, T, NH, NKV, HS);
  }
  void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int C) override {
    ms::bias_gelu_forward(out, pre, bias, N, C);
  }
  void bias_gelu_forward_bf16(bf16_t* out, float* pre, const float* bias, int N, int C) override {
    ms::bias_gelu_forward_bf16(out, pre, bias, N, C);
  }
  void bias_gelu_backward(float* dpre, float* dbias, const float* dout, const float* pre, int N, int C) override {
    ms::bias_gelu_backward(dpre, dbias, dout, pre, N, C);
  }
  void attention_forward(bool bf16, float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV,
                         int W) override {
    (bf16 ? ms::attention_forward_bf16 : ms::attention_forward)(out, lse, qkv, B, T, C, NH, NKV, W);
  }
  void attention_backward(bool bf16, float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH, int NKV, int W) override {
    (bf16 ? ms::attention_backward_bf16 : ms::attention_backward)(dqkv, dout, qkv, out, lse, B, T, C, NH, NKV, W);
  }
  void softmax_cross_entropy(float* losses, float* dlogits, const float* logits, const int* targets, int N, int V,
                             int Vp, float dloss) override {
    softmax_cross_entropy_forward_backward(losses, dlogits, logits, targets, N, V, Vp, dloss);
  }
  void softmax_cross_entropy_bf16(float* losses, bf16_t* dlogits, const float* logits, const int* targets, int N,
                                  int V, int Vp, float dloss) override {
    softmax_cross_entropy_forward_backward_bf16(losses, dlogits, logits, targets, N, V, Vp, dloss);
  }
  void vocab_shard_row_max(float* row_max, const float* logits, const int* targets, int N, int V, int Vl,
                           int v0) override {
    ms::vocab_shard_row_max(row_max, logits, targets, N, V, Vl, v0);
  }
  void vocab_shard_sum_exp(float* sums, const float* logits, const float* row_max, const int* targets, int N,
                           int V, int Vl, int v0) override {
    ms::vocab_shard_sum_exp(sums, logits, row_max, targets, N, V, Vl, v0);
  }
  void vocab_shard_loss_grad(float* losses, float* dlogits, const float* logits, const float* row_max,
                             const float* sums, const int* targets, int N, int V, int Vl, int v0,
                             float dloss) override {
    ms::vocab_shard_loss_grad(losses, dlogits, logits, row_max, sums, targets, N, V, Vl, v0, dloss);
  }
  void vocab_shard_loss_grad_bf16(float* losses, bf16_t* dlogits, const float* logits, const float* row_max,
                                  const float* sums, const int* targets, int N, int V, int Vl, int v0,
                                  float dloss) override {
    ms::vocab_shard_loss_grad_bf16(losses, dlogits, logits, row_max, sums, targets, N, V, Vl, v0, dloss);
  }

  void embedding_lookup(float* out, const int* ids, const float* wte, int lo, int hi, int C, int v0,
                        int v1) override {
#pragma omp parallel for schedule(static)
    for (int i = lo; i < hi; i++) {
      float* o = out + static_cast<size_t>(i) * C;
      const int id = ids[i];
      if (id >= v0 && id < v1) std::memcpy(o, wte + static_cast<size_t>(id - v0) * C, sizeof(float) * C);
      else std::fill(o, o + C, 0.0f);
    }
  }
  void add_position_embedding(float* out, const float* wpe, int n, int C, int T, int row0) override {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
      float* o = out + static_cast<size_t>(i) * C;
      const float* pe = wpe + static_cast<size_t>((row0 + i) % T) * C;
#pragma omp simd
      for (int c = 0; c < C; c++) o[c] += pe[c];
    }
  }
  // Parallel over channel blocks so every (row, c) is summed by one thread in row order.
  void embedding_backward(float* dwte, float* dwpe, const float* d, const float* d_local, const int* ids, int N,
                          int n, int C, int T, int row0, int v0, int v1) override {
    constexpr int kBlock = 32;
    const int nblocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      const int c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
      for (int i = 0; dwpe && i < n; i++) {  // no position embedding: nothing to add
        const float* di = d_local + static_cast<size_t>(i) * C;
        float* pe = dwpe + static_cast<size_t>((row0 + i) % T) * C;
        for (int c = c0; c < c1; c++) pe[c] += di[c];
      }
      for (int i = 0; i < N; i++) {
        const int id = ids[i];
        if (id < v0 || id >= v1) continue;
        const float* di = d + static_cast<size_t>(i) * C;
        float* we = dwte + static_cast<size_t>(id - v0) * C;
        for (int c = c0; c < c1; c++) we[c] += di[c];
      }
    }
  }
  void copy(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, sizeof(float) * n); }
  void fill(float* p, float value, size_t n) override { std::fill(p, p + n, value); }
  void add(float* out, const float* in, size_t n) override {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) out[i] += in[i];
  }
  void delay(double ms) override { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); }
  float masked_loss_mean(const float* losses, const int* targets, int N) override {
    return masked_loss_mean_host(losses, targets, N);
  }
};

}  // namespace

float masked_loss_mean_host(const float* losses, const int* targets, int N) {
  double sum = 0;
  int count = 0;
  for (int i = 0; i < N; i++)
    if (targets[i] >= 0) { sum += losses[i]; count++; }
  return count ? static_cast<float>(sum / count) : 0.0f;
}

KernelBackend& cpu_kernels() {
  static CpuKernels k;
  return k;
}

KernelBackend& kernels_for(Device d) { return d == Device::kCuda ? cuda_kernels() : cpu_kernels(); }

}  // namespace ms
