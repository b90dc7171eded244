// rmsnorm.cu: RMSNorm forward/backward (kernels/rmsnorm.h) on the GPU, one warp per row: the row's
// mean square and the backward's dot product are summed over a fixed shuffle tree, the rest is the
// CPU's expressions in its order (no fma contraction). dinp and dweight ACCUMULATE (+=); dweight goes
// through common.cuh's column sums: fixed 32-row chunks (the CPU's chunks), summed in order.
// Guarantees: deterministic (no atomics: the same inputs give the same bits on every run); no device
// allocation after the first backward (the column-sum scratch is grown once and kept).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;
using detail::warp_sum;
constexpr int kWarps = 8;

// out = x * rstd * w with rstd = 1 / sqrt(mean(x^2) + eps), as rmsnorm.cpp's fwd_rows.
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* w, int N, int C,
                                       float eps) {
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;  // the whole warp: one row per warp
  const float* x = inp + static_cast<size_t>(row) * C;
  float ss = 0.f;
  for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
  const float r = 1.f / sqrtf(warp_sum(ss) / C + eps);
  float* o = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = x[c] * r * w[c];
  if (lane == 0) rstd[row] = r;
}

// dinp += r (w g - x k) with k = mean(w g x) r^2, as rmsnorm.cpp's bwd_rows.
__global__ void rmsnorm_backward_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                        const float* rstd, int N, int C) {
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float r = rstd[row];
  float dot = 0.f;
  for (int c = lane; c < C; c += 32) dot += w[c] * dout[off + c] * inp[off + c];
  const float k = warp_sum(dot) / C * r * r;
  for (int c = lane; c < C; c += 32) dinp[off + c] += r * (w[c] * dout[off + c] - inp[off + c] * k);
}

// dweight's term of row r, column c: x * rstd * g (the CPU's x[c] * r * g[c]).
struct XRstdDout {
  const float *dout, *inp, *rstd;
  int C;
  __device__ float operator()(int r, int c) const {
    const size_t i = static_cast<size_t>(r) * C + c;
    return inp[i] * rstd[r] * dout[i];
  }
};

void check_shape(const char* what, int N, int C, float eps) {
  if (N < 0 || C <= 0 || !(eps >= 0.f))
    device_call_failed(__FILE__, __LINE__, what, 0, "N >= 0, C > 0 and eps >= 0 required");
}
}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     Stream s) {
  check_shape("cuda::rmsnorm_forward", N, C, eps);
  if (N == 0) return;
  rmsnorm_forward_kernel<<<detail::blocks_for(N, kWarps), 32 * kWarps, 0, st(s)>>>(out, rstd, inp, weight, N, C,
                                                                                    eps);
  MS_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, Stream s) {
  check_shape("cuda::rmsnorm_backward", N, C, 0.f);
  if (N == 0) return;
  rmsnorm_backward_kernel<<<detail::blocks_for(N, kWarps), 32 * kWarps, 0, st(s)>>>(dinp, dout, inp, weight, rstd,
                                                                                     N, C);
  MS_CUDA_CHECK_LAUNCH();
  detail::column_sums(dweight, XRstdDout{dout, inp, rstd, C}, N, C, s);
}

}  // namespace ms::cuda
