// vocab_cross_entropy.cu: the three phases of vocab_parallel_cross_entropy.h on the device, one
// 512-thread block per row over the row's `valid` = clamp(V - v0, 0, Vl) real local columns.
// Phase 1 a block max (order-free); phase 2 a float sum of exp per thread (strided columns) whose
// partials are added in double over a fixed tree (deterministic); phase 3 the loss in double as the
// CPU forms it, and the gradient exp(x - max) * (dloss / sum), minus dloss at the target, each
// element written by the thread that read its logit (so dlogits may alias logits). Ignored rows
// (-1): sum 0, loss 0, gradient 0. expf where the CPU has its vector exp (within 1e-5 rel L2).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;
constexpr int kThreads = 512;

__device__ __forceinline__ int real_columns(int V, int Vl, int v0) { return max(0, min(Vl, V - v0)); }

__global__ void row_max_kernel(float* out, const float* logits, int V, int Vl, int v0) {
  __shared__ float sh[32];
  const float* x = logits + static_cast<size_t>(blockIdx.x) * Vl;
  const int valid = real_columns(V, Vl, v0);
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) mx = mx > x[j] ? mx : x[j];
  mx = detail::warp_max(mx);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = mx;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = sh[0];
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) m = fmaxf(m, sh[w]);
    out[blockIdx.x] = m;
  }
}

__global__ void sum_exp_kernel(float* sums, const float* logits, const float* row_max, const int* targets, int V,
                               int Vl, int v0) {
  __shared__ double sh[32];
  const int row = blockIdx.x;
  const float* x = logits + static_cast<size_t>(row) * Vl;
  const int valid = real_columns(V, Vl, v0);
  const int target = targets[row];
  if (target < 0) {  // ignored row (uniform over the block: no barrier is skipped by part of it)
    if (threadIdx.x == 0) sums[2 * row] = sums[2 * row + 1] = 0.f;
    return;
  }
  const float mx = row_max[row];
  float s = 0.f;
  for (int j = threadIdx.x; j < valid; j += blockDim.x) s += expf(x[j] - mx);
  const double total = detail::block_sum(static_cast<double>(s), sh);
  if (threadIdx.x == 0) {
    const int t = target - v0;
    sums[2 * row] = static_cast<float>(total);
    sums[2 * row + 1] = t >= 0 && t < valid ? x[t] : 0.f;
  }
}

template <typename G>
__device__ __forceinline__ void store(G* d, int j, float g) {
  if constexpr (sizeof(G) == 2) d[j] = detail::f32_to_bf16_bits(g);
  else d[j] = g;
}

// write_grad false: losses only (the fp32 form with dloss == 0 leaves dlogits untouched).
template <typename G>
__global__ void loss_grad_kernel(float* losses, G* dlogits, const float* logits, const float* row_max,
                                 const float* sums, const int* targets, int V, int Vl, int v0, float dloss,
                                 bool write_grad) {
  const int row = blockIdx.x;
  const size_t o = static_cast<size_t>(row) * Vl;
  const int target = targets[row];
  G* d = write_grad ? dlogits + o : nullptr;
  if (target < 0) {
    if (threadIdx.x == 0) losses[row] = 0.f;
    if (write_grad)
      for (int j = threadIdx.x; j < Vl; j += blockDim.x) store(d, j, 0.f);
    return;
  }
  if (threadIdx.x == 0)
    losses[row] = static_cast<float>(log(static_cast<double>(sums[2 * row])) + static_cast<double>(row_max[row]) -
                                     static_cast<double>(sums[2 * row + 1]));
  if (!write_grad) return;
  const float* x = logits + o;
  const int valid = real_columns(V, Vl, v0);
  const int t = target - v0 >= 0 && target - v0 < valid ? target - v0 : -1;
  const float mx = row_max[row], scale = dloss / sums[2 * row];
  for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
    float g = 0.f;
    if (j < valid) {
      g = expf(x[j] - mx) * scale;
      if (j == t) g = g - dloss;  // the CPU's d[t] -= dloss after the scaled exp
    }
    store(d, j, g);
  }
}
}  // namespace

void vocab_shard_row_max(float* row_max, const float* logits, const int* targets, int N, int V, int Vl, int v0,
                         Stream s) {
  (void)targets;  // validated on the host by the caller (device memory here)
  if (N <= 0) return;
  row_max_kernel<<<N, kThreads, 0, st(s)>>>(row_max, logits, V, Vl, v0);
  MS_CUDA_CHECK_LAUNCH();
}

void vocab_shard_sum_exp(float* sums, const float* logits, const float* row_max, const int* targets, int N, int V,
                         int Vl, int v0, Stream s) {
  if (N <= 0) return;
  sum_exp_kernel<<<N, kThreads, 0, st(s)>>>(sums, logits, row_max, targets, V, Vl, v0);
  MS_CUDA_CHECK_LAUNCH();
}

void vocab_shard_loss_grad(float* losses, float* dlogits, const float* logits, const float* row_max,
                           const float* sums, const int* targets, int N, int V, int Vl, int v0, float dloss,
                           Stream s) {
  if (N <= 0) return;
  loss_grad_kernel<float><<<N, kThreads, 0, st(s)>>>(losses, dlogits, logits, row_max, sums, targets, V, Vl, v0,
                                                     dloss, dloss != 0.f);
  MS_CUDA_CHECK_LAUNCH();
}

void vocab_shard_loss_grad_bf16(float* losses, bf16_t* dlogits, const float* logits, const float* row_max,
                                const float* sums, const int* targets, int N, int V, int Vl, int v0, float dloss,
                                Stream s) {
  if (N <= 0) return;
  loss_grad_kernel<bf16_t><<<N, kThreads, 0, st(s)>>>(losses, dlogits, logits, row_max, sums, targets, V, Vl, v0,
                                                      dloss, true);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
