// adamw.cpp: see adamw.h.
#include "optim/adamw.h"
#include "optim/optim_simd.h"  // optim_simd_active
#include "optim/work_split.h"  // optim_detail::split_point, num_blocks

#include <immintrin.h>  // AVX2 / FMA intrinsics
#include <omp.h>

#include <cmath>  // std::fma, std::sqrt, std::pow

#include "base/check.h"  // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope

// No a*b+c contraction into fma: the only fused operations are the explicit ones, so the scalar
// and AVX2 paths (and any -march) give the same bits.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

namespace ms {
namespace {

struct AdamConsts {
  float decay_mul;  // float(1 - lr*wd)
  float b1, c1;     // beta1, float(1 - beta1)
  float b2, c2;     // beta2, float(1 - beta2)
  float neg_step;   // float(-(lr / bc1))
  float bc2s;       // float(sqrt(bc2))
  float eps;
  float gscale;     // gradient scale (clipping); 1 = none
  bool zero_g;      // write 0 into g after reading it
};

template <bool Decay>
void adamw_scalar(float* p, float* g, float* m, float* v, bf16_t* pb, size_t n, const AdamConsts& c) {
  for (size_t i = 0; i < n; ++i) {
    float pi = p[i];
    if constexpr (Decay) pi = pi * c.decay_mul;
    const float gi = c.gscale == 1.0f ? g[i] : g[i] * c.gscale;
    if (c.zero_g) g[i] = 0.0f;
    const float mi = std::fma(gi, c.c1, m[i] * c.b1);
    const float vi = std::fma(c.c2 * gi, gi, v[i] * c.b2);
    m[i] = mi;
    v[i] = vi;
    const float den = std::sqrt(vi) / c.bc2s + c.eps;
    p[i] = pi + (c.neg_step * mi) / den;
    if (pb) pb[i] = f32_to_bf16_rne(p[i]);
  }
}

// 8 floats -> 8 bf16, round to nearest even, NaN kept quiet (as f32_to_bf16_rne).
__attribute__((target("avx2,fma"))) inline void store_bf16x8(bf16_t* out, __m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb)), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
  r = _mm256_blendv_epi8(r, q, nan);
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);  // lanes 0, 2
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
}

template <bool Decay>
__attribute__((target("avx2,fma"))) void adamw_avx2(float* p, float* g, float* m, float* v, bf16_t* pb,
                                                    size_t n, const AdamConsts& c) {
  const __m256 dmul = _mm256_set1_ps(c.decay_mul), b1 = _mm256_set1_ps(c.b1), c1 = _mm256_set1_ps(c.c1);
  const __m256 b2 = _mm256_set1_ps(c.b2), c2 = _mm256_set1_ps(c.c2), ns = _mm256_set1_ps(c.neg_step);
  const __m256 bc2s = _mm256_set1_ps(c.bc2s), eps = _mm256_set1_ps(c.eps), gs = _mm256_set1_ps(c.gscale);
  const bool scaled = c.gscale != 1.0f;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i);
    if constexpr (Decay) pi = _mm256_mul_ps(pi, dmul);
    __m256 gi = _mm256_loadu_ps(g + i);
    if (c.zero_g) _mm256_storeu_ps(g + i, _mm256_setzero_ps());
    if (scaled) gi = _mm256_mul_ps(gi, gs);
    const __m256 mi = _mm256_fmadd_ps(gi, c1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
    const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(c2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2s), eps);
    const __m256 pn = _mm256_add_ps(pi, _mm256_div_ps(_mm256_mul_ps(ns, mi), den));
    _mm256_storeu_ps(p + i, pn);
    if (pb) store_bf16x8(pb + i, pn);
  }
  adamw_scalar<Decay>(p + i, g + i, m + i, v + i, pb ? pb + i : nullptr, n - i, c);
}

void adamw_range(float* p, float* g, float* m, float* v, bf16_t* pb, size_t n, const AdamConsts& c,
                 bool decay, bool simd) {
  if (n == 0) return;
  if (simd) {
    decay ? adamw_avx2<true>(p, g, m, v, pb, n, c) : adamw_avx2<false>(p, g, m, v, pb, n, c);
  } else {
    decay ? adamw_scalar<true>(p, g, m, v, pb, n, c) : adamw_scalar<false>(p, g, m, v, pb, n, c);
  }
}

}  // namespace

void adamw_update(float* params, float* grads, float* m, float* v,
                  const std::vector<ParamTensor>& tensors, float lr, int t, const AdamHyper& h,
                  float grad_scale, bf16_t* bf16_out, bool zero_grads) {
  KernelTimeScope timed(KernelId::kOptimizer);
  MS_CHECK(t >= 1, "adamw_update: step t must start at 1, got {}", t);
  MS_CHECK(h.beta1 >= 0.f && h.beta1 < 1.f && h.beta2 >= 0.f && h.beta2 < 1.f,
           "adamw_update: betas must lie in [0, 1), got {} {}", h.beta1, h.beta2);
  MS_CHECK(h.eps > 0.f, "adamw_update: eps must be > 0, got {}", h.eps);
  // Scalars as torch forms them: Python doubles, rounded to float where they meet a tensor.
  const double lr_d = lr, b1 = h.beta1, b2 = h.beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
  AdamConsts c;
  c.decay_mul = static_cast<float>(1.0 - lr_d * static_cast<double>(h.weight_decay));
  c.b1 = h.beta1;
  c.c1 = static_cast<float>(1.0 - b1);
  c.b2 = h.beta2;
  c.c2 = static_cast<float>(1.0 - b2);
  c.neg_step = static_cast<float>(-(lr_d / bc1));
  c.bc2s = static_cast<float>(std::sqrt(bc2));
  c.eps = h.eps;
  c.gscale = grad_scale;
  c.zero_g = zero_grads;
  const bool simd = optim_simd_active();
  size_t total = 0;
  for (const ParamTensor& pt : tensors) total += pt.numel;

#pragma omp parallel if (total > optim_detail::kMinBlock)
  {
    const size_t nth = omp_get_num_threads(), ith = omp_get_thread_num();
    for (const ParamTensor& pt : tensors) {
      const size_t lo = optim_detail::split_point(pt.numel, nth, ith);
      const size_t hi = optim_detail::split_point(pt.numel, nth, ith + 1);
      const size_t o = pt.offset + lo;
      adamw_range(params + o, grads + o, m + o, v + o, bf16_out ? bf16_out + o : nullptr, hi - lo, c,
                  pt.decay && h.weight_decay != 0.f, simd);
    }
  }
}

}  // namespace ms

#pragma GCC pop_options
