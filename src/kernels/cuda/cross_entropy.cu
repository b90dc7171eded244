// cross_entropy.cu: fused softmax + cross-entropy (+ gradient), one 512-thread block per row.
// Pass 1 keeps an online (max, sum of exp) per thread over the row's V real columns and merges
// them in a fixed tree (deterministic); pass 2 writes the gradient (fp32, possibly in place over
// the logits, or bf16). Padded columns get 0; an ignored row (-1) has loss 0 and gradient 0; any
// other id outside [0, V) gives a NaN loss and gradient (ids are validated on the host first).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;
constexpr int kThreads = 512;

struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

template <typename G>
__global__ void softmax_ce_kernel(float* losses, G* dlogits, const float* logits, const int* targets,
                                  int V, int Vp, float dloss) {
  __shared__ float sm[32], ss[32];
  const int row = blockIdx.x;
  const float* x = logits + static_cast<size_t>(row) * Vp;
  const int t = targets[row];
  G* d = dlogits ? dlogits + static_cast<size_t>(row) * Vp : nullptr;
  if (t == -1) {  // ignored row
    if (threadIdx.x == 0) losses[row] = 0.f;
    if (d)
      for (int j = threadIdx.x; j < Vp; j += blockDim.x) d[j] = G(0);
    return;
  }
  MaxSum a{-INFINITY, 0.f};
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float v = x[j];
    if (v > a.m) {
      a.s = a.s * expf(a.m - v) + 1.f;
      a.m = v;
    } else {
      a.s += expf(v - a.m);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum b{__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)};
    a = merge(a, b);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool valid = t >= 0 && t < V;
  // Read before the barrier: after it, other threads may overwrite the logits (in place).
  const float xt = (threadIdx.x == 0 && valid) ? x[t] : 0.f;
  if (lane == 0) {
    sm[warp] = a.m;
    ss[warp] = a.s;
  }
  __syncthreads();
  MaxSum tot{sm[0], ss[0]};
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) tot = merge(tot, MaxSum{sm[w], ss[w]});
  const float lse = tot.m + logf(tot.s);
  if (threadIdx.x == 0) losses[row] = valid ? lse - xt : NAN;
  if (!d) return;
  const float inv = 1.f / tot.s;
  for (int j = threadIdx.x; j < Vp; j += blockDim.x) {
    float g = 0.f;
    if (!valid) g = NAN;
    else if (j < V) g = dloss * (expf(x[j] - tot.m) * inv - (j == t ? 1.f : 0.f));
    if constexpr (sizeof(G) == 2) d[j] = detail::f32_to_bf16_bits(g);
    else d[j] = g;
  }
}
}  // namespace

void softmax_cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits,
                                            const int* targets, int N, int V, int Vp, float dloss, Stream s) {
  if (N <= 0) return;
  softmax_ce_kernel<float><<<N, kThreads, 0, st(s)>>>(losses, dlogits, logits, targets, V, Vp, dloss);
  MS_CUDA_CHECK_LAUNCH();
}
void softmax_cross_entropy_forward_backward_bf16(float* losses, bf16_t* dlogits_bf16, const float* logits,
                                                 const int* targets, int N, int V, int Vp, float dloss, Stream s) {
  if (N <= 0) return;
  softmax_ce_kernel<bf16_t><<<N, kThreads, 0, st(s)>>>(losses, dlogits_bf16, logits, targets, V, Vp, dloss);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
