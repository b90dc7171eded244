// backend_cuda.cpp (CUDA builds only): the CUDA KernelBackend (backend.h): every entry forwards to
// its ms::cuda:: kernel (cuda_kernels.h) on the default stream; masked_loss_mean reads the losses
// back into a host scratch that only grows, waits for the stream and averages them on the host
// (masked_loss_mean_host, the CPU backend's arithmetic).
#include <cstddef>  // size_t
#include <vector>

#include "base/device.h"  // copy_bytes, stream_sync, require_device
#include "kernels/backend.h"
#include "kernels/cuda_kernels.h"

namespace ms {
namespace {

class CudaBackend final : public KernelBackend {
 public:
  Device device() const override { return Device::kCuda; }
  Stream stream() const override { return {}; }

  void gemm_f32(bool tA, bool tB, int M, int N, int K, const float* A, const float* B, float* C,
                bool accumulate) override {
    cuda::gemm_f32(tA, tB, M, N, K, A, B, nullptr, C, accumulate, stream());
  }
  void gemm_bf16(bool tA, bool tB, int M, int N, int K, const bf16_t* A, const bf16_t* B, float* C,
                 bool accumulate) override {
    cuda::gemm_bf16(tA, tB, M, N, K, A, B, nullptr, C, accumulate, stream());
  }
  void matmul_forward(float* out, const float* inp, const float* w, const float* b, int N, int C, int OC,
                      bool acc) override {
    cuda::matmul_forward(out, inp, w, b, N, C, OC, acc, stream());
  }
  void matmul_forward_bf16(float* out, const bf16_t* inp, const bf16_t* w, const float* b, int N, int C, int OC,
                           bool acc) override {
    cuda::matmul_forward_bf16(out, inp, w, b, N, C, OC, acc, stream());
  }
  void add_column_sums(float* out, const float* x, int N, int C) override {
    cuda::add_column_sums(out, x, N, C, stream());
  }
  void f32_to_bf16(bf16_t* out, const float* in, size_t n) override { cuda::f32_to_bf16(out, in, n, stream()); }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                         int N, int C, float eps) override {
    cuda::layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps, stream());
  }
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                          const float* mean, const float* rstd, int N, int C) override {
    cuda::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, stream());
  }
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* w, int N, int C, float eps) override {
    cuda::rmsnorm_forward(out, rstd, inp, w, N, C, eps, stream());
  }
  void rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w, const float* rstd,
                        int N, int C) override {
    cuda::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, stream());
  }
  void swiglu_forward(float* out, const float* pre, int N, int F) override {
    cuda::swiglu_forward(out, pre, N, F, stream());
  }
  void swiglu_forward_bf16(bf16_t* out, const float* pre, int N, int F) override {
    cuda::swiglu_forward_bf16(out, pre, N, F, stream());
  }
  void swiglu_backward(float* dpre, const float* dout, const float* pre, int N, int F) override {
    cuda::swiglu_backward(dpre, dout, pre, N, F, stream());
  }
  void rope_forward(float* qkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV,
                    int HS) override {
    cuda::rope_forward(qkv, cos, sin, lo, hi, T, NH, NKV, HS, stream());
  }
  void rope_backward(float* dqkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV,
                     int HS) override {
    cuda::rope_backward(dqkv, cos, sin, lo, hi, T, NH, NKV, HS, stream());
  }
  void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int C) override {
    cuda::bias_gelu_forward(out, pre, bias, N, C, stream());
  }
  void bias_gelu_forward_bf16(bf16_t* out, float* pre, const float* bias, int N, int C) override {
    cuda::bias_gelu_forward_bf16(out, pre, bias, N, C, stream());
  }
  void bias_gelu_backward(float* dpre, float* dbias, const float* dout, const float* pre, int N, int C) override {
    cuda::bias_gelu_backward(dpre, dbias, dout, pre, N, C, stream());
  }
  void attention_forward(bool bf16, float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV,
                         int W) override {
    (bf16 ? cuda::attention_forward_bf16 : cuda::attention_forward)(out, lse, qkv, B, T, C, NH, NKV, W, stream());
  }
  void attention_backward(bool bf16, float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH, int NKV, int W) override {
    (bf16 ? cuda::attention_backward_bf16 : cuda::attention_backward)(dqkv, dout, qkv, out, lse, B, T, C, NH, NKV,
                                                                      W, stream());
  }
  void softmax_cross_entropy(float* losses, float* dlogits, const float* logits, const int* targets, int N, int V,
                             int Vp, float dloss) override {
    cuda::softmax_cross_entropy_forward_backward(losses, dlogits, logits, targets, N, V, Vp, dloss, stream());
  }
  void softmax_cross_entropy_bf16(float* losses, bf16_t* dlogits, const float* logits, const int* targets, int N,
                                  int V, int Vp, float dloss) override {
    cuda::softmax_cross_entropy_forward_backward_bf16(losses, dlogits, logits, targets, N, V, Vp, dloss, stream());
  }
  void vocab_shard_row_max(float* row_max, const float* logits, const int* targets, int N, int V, int Vl,
                           int v0) override {
    cuda::vocab_shard_row_max(row_max, logits, targets, N, V, Vl, v0, stream());
  }
  void vocab_shard_sum_exp(float* sums, const float* logits, const float* row_max, const int* targets, int N,
                           int V, int Vl, int v0) override {
    cuda::vocab_shard_sum_exp(sums, logits, row_max, targets, N, V, Vl, v0, stream());
  }
  void vocab_shard_loss_grad(float* losses, float* dlogits, const float* logits, const float* row_max,
                             const float* sums, const int* targets, int N, int V, int Vl, int v0,
                             float dloss) override {
    cuda::vocab_shard_loss_grad(losses, dlogits, logits, row_max, sums, targets, N, V, Vl, v0, dloss, stream());
  }
  void vocab_shard_loss_grad_bf16(float* losses, bf16_t* dlogits, const float* logits, const float* row_max,
                                  const float* sums, const int* targets, int N, int V, int Vl, int v0,
                                  float dloss) override {
    cuda::vocab_shard_loss_grad_bf16(losses, dlogits, logits, row_max, sums, targets, N, V, Vl, v0, dloss,
                                     stream());
  }

  void embedding_lookup(float* out, const int* ids, const float* wte, int lo, int hi, int C, int v0,
                        int v1) override {
    cuda::embedding_lookup(out, ids, wte, lo, hi, C, v0, v1, stream());
  }
  void add_position_embedding(float* out, const float* wpe, int n, int C, int T, int row0) override {
    cuda::add_position_embedding(out, wpe, n, C, T, row0, stream());
  }
  void embedding_backward(float* dwte, float* dwpe, const float* d_full, const float* d_local, const int* ids,
                          int N, int n, int C, int T, int row0, int v0, int v1) override {
    cuda::embedding_backward_rows(dwte, dwpe, d_full, d_local, ids, N, n, C, T, row0, v0, v1, stream());
  }
  void copy(float* dst, const float* src, size_t n) override {
    copy_bytes(dst, Device::kCuda, src, Device::kCuda, n * sizeof(float), stream());
  }
  void fill(float* p, float value, size_t n) override { cuda::fill(p, n, value, stream()); }
  void add(float* out, const float* in, size_t n) override { cuda::add(out, in, n, stream()); }
  void delay(double ms) override { cuda::spin(ms, stream()); }
  float masked_loss_mean(const float* losses, const int* host_targets, int N) override {
    if (N <= 0) return 0.0f;
    const size_t n = static_cast<size_t>(N);
    if (host_losses_.size() < n) host_losses_.resize(n);
    copy_bytes(host_losses_.data(), Device::kCpu, losses, Device::kCuda, n * sizeof(float), stream());
    stream_sync(stream());
    return masked_loss_mean_host(host_losses_.data(), host_targets, N);
  }

 private:
  std::vector<float> host_losses_;  // masked_loss_mean's read-back; grows, never shrinks
};

}  // namespace

KernelBackend& cuda_kernels() {
  require_device(Device::kCuda);
  static CudaBackend k;
  return k;
}

}  // namespace ms
