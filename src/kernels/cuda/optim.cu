// optim.cu: LAMB's two phases for one tensor (optim/lamb.h, operation by operation in the CPU's
// fp32 arithmetic: --fmad=false, explicit fmaf exactly where lamb.cpp has std::fma, IEEE sqrt and
// division) and the sum of squares in double.
// Sums are two-pass and deterministic: a grid whose size depends on n only (kThreads threads,
// at most kMaxBlocks blocks, grid-stride) writes one double partial per block (a fixed shuffle
// tree); then one block adds the partials in a fixed tree. The partials live in the kSumPartials
// scratch slot, sized for kMaxBlocks on the first call: no device allocation after it.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;
constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 1024;
constexpr size_t kPerThread = 8;  // elements per thread before a grid grows past one block

unsigned sum_blocks(size_t n) {  // n > 0
  const size_t b = (n + kThreads * kPerThread - 1) / (kThreads * kPerThread);
  return b > kMaxBlocks ? kMaxBlocks : static_cast<unsigned>(b);
}
// Two partial arrays of kMaxBlocks doubles (the second for LAMB's second sum). Shared by every
// call: calls on different streams must not overlap (one stream drives the optimizer).
double* partials() {
  return static_cast<double*>(detail::scratch(detail::Slot::kSumPartials, 2 * sizeof(double) * kMaxBlocks));
}

#define MS_GRID_STRIDE(i, n)                                                                  \
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);        \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

struct LambConsts {
  float b1, c1, b2, c2, bc1, bc2s, eps, wd;
  bool decay;
};

// Phase 1 (lamb.cpp's lamb_elem_scalar) and the per-block partial sums of p^2 and r^2.
__global__ void lamb_phase1_kernel(const float* p, const float* g, float* m, float* v, float* u, size_t n,
                                   LambConsts c, double* wpart, double* rpart) {
  __shared__ double sh[32];
  double wacc = 0.0, racc = 0.0;
  MS_GRID_STRIDE(i, n) {
    const float gi = g[i];
    const float pi = p[i];
    const float mi = fmaf(gi, c.c1, m[i] * c.b1);
    const float vi = fmaf(c.c2 * gi, gi, v[i] * c.b2);
    m[i] = mi;
    v[i] = vi;
    const float den = sqrtf(vi) / c.bc2s + c.eps;
    float r = (mi / c.bc1) / den;
    if (c.decay) r = r + c.wd * pi;
    u[i] = r;
    const double pd = pi, rd = r;
    wacc += pd * pd;
    racc += rd * rd;
  }
  wacc = detail::block_sum(wacc, sh);
  racc = detail::block_sum(racc, sh);
  if (threadIdx.x == 0) {
    wpart[blockIdx.x] = wacc;
    rpart[blockIdx.x] = racc;
  }
}

__global__ void sq_partial_kernel(const float* x, size_t n, double* part) {
  __shared__ double sh[32];
  double acc = 0.0;
  MS_GRID_STRIDE(i, n) {
    const double d = x[i];
    acc += d * d;
  }
  acc = detail::block_sum(acc, sh);
  if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

// *out = sum of part[b] over b < nb (one block: strided per thread, then a fixed tree).
__global__ void finish_kernel(double* out, const double* part, unsigned nb) {
  __shared__ double sh[32];
  double acc = 0.0;
  for (unsigned b = threadIdx.x; b < nb; b += blockDim.x) acc += part[b];
  acc = detail::block_sum(acc, sh);
  if (threadIdx.x == 0) *out = acc;
}

__global__ void lamb_apply_kernel(float* p, const float* u, size_t n, float step) {
  MS_GRID_STRIDE(i, n) p[i] = p[i] - step * u[i];
}

// lamb.cpp's make_consts (same double forms rounded to float once) and its checks.
LambConsts lamb_consts(int t, float beta1, float beta2, float eps, float weight_decay, bool bias_correction,
                       bool decay) {
  if (t < 1 || !(beta1 >= 0.f && beta1 < 1.f && beta2 >= 0.f && beta2 < 1.f) || !(eps > 0.f))
    device_call_failed(__FILE__, __LINE__, "cuda::lamb_compute_update", 0,
                       "t >= 1, betas in [0, 1) and eps > 0 required");
  const double b1 = beta1, b2 = beta2;
  LambConsts c;
  c.b1 = beta1;
  c.c1 = static_cast<float>(1.0 - b1);
  c.b2 = beta2;
  c.c2 = static_cast<float>(1.0 - b2);
  c.bc1 = bias_correction ? static_cast<float>(1.0 - std::pow(b1, static_cast<double>(t))) : 1.0f;
  c.bc2s = bias_correction ? static_cast<float>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t)))) : 1.0f;
  c.eps = eps;
  c.wd = weight_decay;
  c.decay = decay && weight_decay != 0.f;  // as lamb.cpp: no + 0 * p term
  return c;
}
}  // namespace

void lamb_compute_update(const float* params, const float* grads, float* m, float* v, float* update, size_t n,
                         bool decay, int t, float beta1, float beta2, float eps, float weight_decay,
                         bool bias_correction, double* w_sq, double* r_sq, Stream s) {
  const LambConsts c = lamb_consts(t, beta1, beta2, eps, weight_decay, bias_correction, decay);
  if (n == 0) {
    device_memset(w_sq, 0, sizeof(double), s);
    device_memset(r_sq, 0, sizeof(double), s);
    return;
  }
  double* part = partials();
  const unsigned nb = sum_blocks(n);
  lamb_phase1_kernel<<<nb, kThreads, 0, st(s)>>>(params, grads, m, v, update, n, c, part, part + kMaxBlocks);
  MS_CUDA_CHECK_LAUNCH();
  finish_kernel<<<1, kThreads, 0, st(s)>>>(w_sq, part, nb);
  MS_CUDA_CHECK_LAUNCH();
  finish_kernel<<<1, kThreads, 0, st(s)>>>(r_sq, part + kMaxBlocks, nb);
  MS_CUDA_CHECK_LAUNCH();
}

void lamb_apply_update(float* params, const float* update, size_t n, float step, Stream s) {
  if (n == 0) return;
  const unsigned b = detail::blocks_for(n, kThreads);
  lamb_apply_kernel<<<b < 132u * 16u ? b : 132u * 16u, kThreads, 0, st(s)>>>(params, update, n, step);
  MS_CUDA_CHECK_LAUNCH();
}

void sum_squares(const float* x, size_t n, double* out, Stream s) {
  if (n == 0) {
    device_memset(out, 0, sizeof(double), s);
    return;
  }
  double* part = partials();
  const unsigned nb = sum_blocks(n);
  sq_partial_kernel<<<nb, kThreads, 0, st(s)>>>(x, n, part);
  MS_CUDA_CHECK_LAUNCH();
  finish_kernel<<<1, kThreads, 0, st(s)>>>(out, part, nb);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
