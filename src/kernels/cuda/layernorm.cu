// layernorm.cu: LayerNorm forward/backward (eps given, biased variance), one warp per row; the
// weight/bias gradients through the deterministic column sums of common.cuh.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;
using detail::warp_sum;
constexpr int kWarps = 8;

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* w, const float* b, int N, int C, float eps) {
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = inp + static_cast<size_t>(row) * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    v += d * d;
  }
  const float r = 1.f / sqrtf(warp_sum(v) / C + eps);
  float* o = out + static_cast<size_t>(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp, const float* w,
                                          const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float m = mean[row], r = rstd[row];
  float a = 0.f, bsum = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float dn = dout[off + c] * w[c];
    a += dn;
    bsum += dn * ((inp[off + c] - m) * r);
  }
  const float mean_dn = warp_sum(a) / C, mean_dnx = warp_sum(bsum) / C;
  for (int c = lane; c < C; c += 32) {
    const float xhat = (inp[off + c] - m) * r;
    const float dn = dout[off + c] * w[c];
    dinp[off + c] += (dn - mean_dn - xhat * mean_dnx) * r;
  }
}

struct DoutXhat {
  const float *dout, *inp, *mean, *rstd;
  int C;
  __device__ float operator()(int r, int c) const {
    const size_t i = static_cast<size_t>(r) * C + c;
    return dout[i] * ((inp[i] - mean[r]) * rstd[r]);
  }
};
struct Dout {
  const float* dout;
  int C;
  __device__ float operator()(int r, int c) const { return dout[static_cast<size_t>(r) * C + c]; }
};
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps, Stream s) {
  if (N <= 0) return;
  layernorm_forward_kernel<<<detail::blocks_for(N, kWarps), 32 * kWarps, 0, st(s)>>>(out, mean, rstd, inp, weight,
                                                                                      bias, N, C, eps);
  MS_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, Stream s) {
  if (N <= 0) return;
  layernorm_backward_kernel<<<detail::blocks_for(N, kWarps), 32 * kWarps, 0, st(s)>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  MS_CUDA_CHECK_LAUNCH();
  detail::column_sums(dweight, DoutXhat{dout, inp, mean, rstd, C}, N, C, s);
  detail::column_sums(dbias, Dout{dout, C}, N, C, s, detail::Slot::kColumnPartials2);
}

}  // namespace ms::cuda
