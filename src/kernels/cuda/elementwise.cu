// elementwise.cu: bf16 <-> fp32 array conversion (exact RNE, NaN kept quiet, as base/bf16.h), fill,
// scale and the AdamW update of optim/adamw.h, step by step in the CPU's arithmetic
// (--fmad=false: only the explicit fmaf calls fuse, exactly where the CPU uses std::fma).
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;
unsigned grid_for(size_t n) {
  const unsigned b = detail::blocks_for(n, 256);
  return b < 132u * 16u ? b : 132u * 16u;
}
#define MS_GRID_STRIDE(i, n)                                                                  \
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);        \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

__global__ void f32_to_bf16_kernel(bf16_t* out, const float* in, size_t n) {
  MS_GRID_STRIDE(i, n) out[i] = detail::f32_to_bf16_bits(in[i]);
}
__global__ void bf16_to_f32_kernel(float* out, const bf16_t* in, size_t n) {
  MS_GRID_STRIDE(i, n) out[i] = detail::bf16_bits_to_f32(in[i]);
}

__global__ void fill_kernel(float* x, size_t n, float value) {
  MS_GRID_STRIDE(i, n) x[i] = value;
}
__global__ void scale_kernel(float* x, size_t n, float s) {
  MS_GRID_STRIDE(i, n) x[i] *= s;
}
__global__ void add_kernel(float* out, const float* in, size_t n) {
  MS_GRID_STRIDE(i, n) out[i] += in[i];
}

struct AdamConsts {
  float decay_mul, b1, c1, b2, c2, neg_step, bc2s, eps, gscale;
  bool decay, zero_g;
};
__global__ void adamw_kernel(float* p, float* g, float* m, float* v, bf16_t* pb, size_t n, AdamConsts c) {
  MS_GRID_STRIDE(i, n) {
    float pi = p[i];
    if (c.decay) pi = pi * c.decay_mul;
    const float gi = c.gscale == 1.0f ? g[i] : g[i] * c.gscale;
    if (c.zero_g) g[i] = 0.0f;
    const float mi = fmaf(gi, c.c1, m[i] * c.b1);
    const float vi = fmaf(c.c2 * gi, gi, v[i] * c.b2);
    m[i] = mi;
    v[i] = vi;
    const float den = sqrtf(vi) / c.bc2s + c.eps;
    const float pn = pi + (c.neg_step * mi) / den;
    p[i] = pn;
    if (pb) pb[i] = detail::f32_to_bf16_bits(pn);
  }
}
}  // namespace

void f32_to_bf16(bf16_t* out, const float* in, size_t n, Stream s) {
  if (n == 0) return;
  f32_to_bf16_kernel<<<grid_for(n), 256, 0, st(s)>>>(out, in, n);
  MS_CUDA_CHECK_LAUNCH();
}
void bf16_to_f32(float* out, const bf16_t* in, size_t n, Stream s) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<grid_for(n), 256, 0, st(s)>>>(out, in, n);
  MS_CUDA_CHECK_LAUNCH();
}

// One thread that holds its stream for `ns` nanoseconds of the GPU's global timer.
__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long t0 = 0, t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

void spin(double ms, Stream s) {
  if (ms <= 0) return;
  spin_kernel<<<1, 1, 0, st(s)>>>(static_cast<unsigned long long>(ms * 1e6));
  MS_CUDA_CHECK_LAUNCH();
}

void add(float* out, const float* in, size_t n, Stream s) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), 256, 0, st(s)>>>(out, in, n);
  MS_CUDA_CHECK_LAUNCH();
}

void fill(float* x, size_t n, float value, Stream s) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), 256, 0, st(s)>>>(x, n, value);
  MS_CUDA_CHECK_LAUNCH();
}
void scale(float* x, size_t n, float s_, Stream s) {
  if (n == 0 || s_ == 1.0f) return;  // as optim/grad_norm.h's scale_inplace
  scale_kernel<<<grid_for(n), 256, 0, st(s)>>>(x, n, s_);
  MS_CUDA_CHECK_LAUNCH();
}

void adamw_update(float* params, float* grads, float* m, float* v, size_t n, bool decay, float lr,
                  int t, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  bf16_t* bf16_out, bool zero_grads, Stream s) {
  if (t < 1 || !(beta1 >= 0.f && beta1 < 1.f && beta2 >= 0.f && beta2 < 1.f) || !(eps > 0.f))
    device_call_failed(__FILE__, __LINE__, "cuda::adamw_update", 0, "t >= 1, betas in [0, 1) and eps > 0 required");
  if (n == 0) return;
  // The scalars exactly as optim/adamw.cpp forms them (double, rounded to float once).
  const double lr_d = lr, b1 = beta1, b2 = beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
  AdamConsts c;
  c.decay_mul = static_cast<float>(1.0 - lr_d * static_cast<double>(weight_decay));
  c.b1 = beta1;
  c.c1 = static_cast<float>(1.0 - b1);
  c.b2 = beta2;
  c.c2 = static_cast<float>(1.0 - b2);
  c.neg_step = static_cast<float>(-(lr_d / bc1));
  c.bc2s = static_cast<float>(std::sqrt(bc2));
  c.eps = eps;
  c.gscale = grad_scale;
  c.decay = decay;
  c.zero_g = zero_grads;
  adamw_kernel<<<grid_for(n), 256, 0, st(s)>>>(params, grads, m, v, bf16_out, n, c);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
