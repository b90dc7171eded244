// lamb.cpp: see lamb.h.
#include "optim/lamb.h"
#include "optim/optim_simd.h"  // optim_simd_active
#include "optim/work_split.h"  // optim_detail::split_point, num_blocks

#include <immintrin.h>  // AVX2 / FMA intrinsics
#include <omp.h>

#include <algorithm>  // std::min, std::fill
#include <cmath>      // std::fma, std::sqrt, std::pow
#include <vector>

#include "base/check.h"      // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope
#include "optim/grad_norm.h"  // optim_detail::sq_accum8, lanes_total

// No a*b+c contraction into fma: only the explicit fmas are fused, on every path and -march.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

namespace ms {
namespace {

using optim_detail::block_begin;
using optim_detail::num_blocks;
using optim_detail::split_point;

struct LambConsts {
  float b1, c1;  // beta1, float(1 - beta1)
  float b2, c2;  // beta2, float(1 - beta2)
  float bc1;     // float(1 - beta1^t), or 1
  float bc2s;    // float(sqrt(1 - beta2^t)), or 1
  float eps;
  float wd;
};

LambConsts make_consts(int t, const LambHyper& h) {
  const AdamHyper& a = h.adam;
  MS_CHECK(t >= 1, "lamb: step t must start at 1, got {}", t);
  MS_CHECK(a.beta1 >= 0.f && a.beta1 < 1.f && a.beta2 >= 0.f && a.beta2 < 1.f,
           "lamb: betas must lie in [0, 1), got {} {}", a.beta1, a.beta2);
  MS_CHECK(a.eps > 0.f, "lamb: eps must be > 0, got {}", a.eps);
  MS_CHECK(h.max_trust >= 0.f, "lamb: max_trust must be >= 0 (0 = no clamp), got {}", h.max_trust);
  const double b1 = a.beta1, b2 = a.beta2;
  LambConsts c;
  c.b1 = a.beta1;
  c.c1 = static_cast<float>(1.0 - b1);
  c.b2 = a.beta2;
  c.c2 = static_cast<float>(1.0 - b2);
  c.bc1 = h.bias_correction ? static_cast<float>(1.0 - std::pow(b1, static_cast<double>(t))) : 1.0f;
  c.bc2s = h.bias_correction ? static_cast<float>(std::sqrt(1.0 - std::pow(b2, static_cast<double>(t)))) : 1.0f;
  c.eps = a.eps;
  c.wd = a.weight_decay;
  return c;
}

// Moments and r for n elements; the scalar and AVX2 versions round identically.
template <bool Decay>
void lamb_elem_scalar(const float* p, const float* g, float* m, float* v, float* u, size_t n,
                      const LambConsts& c) {
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = std::fma(gi, c.c1, m[i] * c.b1);
    const float vi = std::fma(c.c2 * gi, gi, v[i] * c.b2);
    m[i] = mi;
    v[i] = vi;
    const float den = std::sqrt(vi) / c.bc2s + c.eps;
    float r = (mi / c.bc1) / den;
    if constexpr (Decay) r = r + c.wd * p[i];
    u[i] = r;
  }
}

template <bool Decay>
__attribute__((target("avx2,fma"))) void lamb_elem_avx2(const float* p, const float* g, float* m, float* v,
                                                        float* u, size_t n, const LambConsts& c) {
  const __m256 b1 = _mm256_set1_ps(c.b1), c1 = _mm256_set1_ps(c.c1), b2 = _mm256_set1_ps(c.b2);
  const __m256 c2 = _mm256_set1_ps(c.c2), bc1 = _mm256_set1_ps(c.bc1), bc2s = _mm256_set1_ps(c.bc2s);
  const __m256 eps = _mm256_set1_ps(c.eps), wd = _mm256_set1_ps(c.wd);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gi = _mm256_loadu_ps(g + i);
    const __m256 mi = _mm256_fmadd_ps(gi, c1, _mm256_mul_ps(_mm256_loadu_ps(m + i), b1));
    const __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(c2, gi), gi, _mm256_mul_ps(_mm256_loadu_ps(v + i), b2));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2s), eps);
    __m256 r = _mm256_div_ps(_mm256_div_ps(mi, bc1), den);
    if constexpr (Decay) r = _mm256_add_ps(r, _mm256_mul_ps(wd, _mm256_loadu_ps(p + i)));
    _mm256_storeu_ps(u + i, r);
  }
  lamb_elem_scalar<Decay>(p + i, g + i, m + i, v + i, u + i, n - i, c);
}

void lamb_elem(const float* p, const float* g, float* m, float* v, float* u, size_t n, const LambConsts& c,
               bool decay, bool simd) {
  if (n == 0) return;
  if (simd) {
    decay ? lamb_elem_avx2<true>(p, g, m, v, u, n, c) : lamb_elem_avx2<false>(p, g, m, v, u, n, c);
  } else {
    decay ? lamb_elem_scalar<true>(p, g, m, v, u, n, c) : lamb_elem_scalar<false>(p, g, m, v, u, n, c);
  }
}

// Working set per chunk (5 arrays x 8 KB) stays in L1/L2 between the update and the two sums.
constexpr size_t kChunk = 2048;  // multiple of 8: the sum lanes stay aligned with the block start

// Phase 1 of one reduction block of n elements (views offset to the block start).
void phase1_block(const float* p, const float* g, float* m, float* v, float* u, size_t n, bool decay,
                  const LambConsts& c, bool simd, double* wsum, double* rsum) {
  double wacc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, racc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < n; i += kChunk) {
    const size_t len = std::min(kChunk, n - i);
    lamb_elem(p + i, g + i, m + i, v + i, u + i, len, c, decay, simd);
    optim_detail::sq_accum8(p + i, len, wacc);
    optim_detail::sq_accum8(u + i, len, racc);
  }
  *wsum = optim_detail::lanes_total(wacc);
  *rsum = optim_detail::lanes_total(racc);
}

// Per calling thread scratch that only grows (no allocation once the largest layout was seen).
// Slot 0: block partials of phase 1; slot 1: lamb_update's per-tensor sums.
double* scratch(int slot, size_t n) {
  thread_local std::vector<double> buf[2];
  if (buf[slot].size() < n) buf[slot].resize(n);
  return buf[slot].data();
}

// p -= s * u for this thread's share of one tensor.
void apply_share(float* p, const float* u, size_t n, float s, size_t nth, size_t ith) {
  const size_t lo = split_point(n, nth, ith), hi = split_point(n, nth, ith + 1);
  for (size_t i = lo; i < hi; ++i) p[i] = p[i] - s * u[i];
}

size_t total_numel(const std::vector<ParamTensor>& tensors) {
  size_t total = 0;
  for (const ParamTensor& pt : tensors) total += pt.numel;
  return total;
}

}  // namespace

float lamb_trust_ratio(double w_norm, double r_norm, float max_trust) {
  double trust = (w_norm == 0.0 || r_norm == 0.0) ? 1.0 : w_norm / r_norm;
  if (max_trust > 0.f) trust = std::min(trust, static_cast<double>(max_trust));
  return static_cast<float>(trust);
}

void lamb_compute_update(const float* params, const float* grads, float* m, float* v, float* update,
                         const std::vector<ParamTensor>& tensors, int t, const LambHyper& h,
                         double* w_sq, double* r_sq) {
  KernelTimeScope timed(KernelId::kOptimizer);
  const LambConsts c = make_consts(t, h);
  const bool simd = optim_simd_active();
  size_t nblocks = 0;
  for (const ParamTensor& pt : tensors) nblocks += num_blocks(pt.numel);
  const size_t total = total_numel(tensors);
  double* wpart = scratch(0, 2 * nblocks);
  double* rpart = wpart + nblocks;
  // One parallel region and no barrier inside: each thread takes the blocks that start in its
  // share of the elements (blocks of all tensors in tensor order); partials go to fixed slots.
#pragma omp parallel if (total > optim_detail::kMinBlock)
  {
    const size_t nth = omp_get_num_threads(), ith = omp_get_thread_num();
    const size_t e_lo = total / nth * ith + std::min(ith, total % nth);
    const size_t e_hi = total / nth * (ith + 1) + std::min(ith + 1, total % nth);
    size_t base = 0, first = 0;  // first block slot and first element (in tensor order) of tensor i
    for (const ParamTensor& pt : tensors) {
      const size_t n = pt.numel, nb = num_blocks(n), o = pt.offset;
      if (first + n >= e_lo && first <= e_hi) {
        for (size_t b = 0; b < nb; ++b) {
          const size_t lo = block_begin(n, nb, b), hi = block_begin(n, nb, b + 1), start = first + lo;
          const bool mine = start >= e_lo && (start < e_hi || (ith == nth - 1 && start == total));
          if (!mine) continue;
          phase1_block(params + o + lo, grads + o + lo, m + o + lo, v + o + lo, update + o + lo, hi - lo,
                       pt.decay && c.wd != 0.f, c, simd, &wpart[base + b], &rpart[base + b]);
        }
      }
      base += nb;
      first += n;
    }
  }
  // Block partials added in block order: the same sums for any thread count.
  size_t base = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t nb = num_blocks(tensors[i].numel);
    double w = 0, r = 0;
    for (size_t b = 0; b < nb; ++b) {
      w += wpart[base + b];
      r += rpart[base + b];
    }
    w_sq[i] += w;
    r_sq[i] += r;
    base += nb;
  }
}

void lamb_apply_update(float* params, const float* update, const std::vector<ParamTensor>& tensors,
                       float lr, const LambHyper& h, const double* w_sq, const double* r_sq) {
  KernelTimeScope timed(KernelId::kOptimizer);
#pragma omp parallel if (total_numel(tensors) > optim_detail::kMinBlock)
  {
    const size_t nth = omp_get_num_threads(), ith = omp_get_thread_num();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const ParamTensor& pt = tensors[i];
      const float s = lr * lamb_trust_ratio(std::sqrt(w_sq[i]), std::sqrt(r_sq[i]), h.max_trust);
      apply_share(params + pt.offset, update + pt.offset, pt.numel, s, nth, ith);
    }
  }
}

void lamb_update(float* params, const float* grads, float* m, float* v, float* update,
                 const std::vector<ParamTensor>& tensors, float lr, int t, const LambHyper& h) {
  KernelTimeScope timed(KernelId::kOptimizer);
  const size_t nt = tensors.size();
  double* w_sq = scratch(1, 2 * nt);
  double* r_sq = w_sq + nt;
  std::fill(w_sq, w_sq + 2 * nt, 0.0);
  lamb_compute_update(params, grads, m, v, update, tensors, t, h, w_sq, r_sq);
  lamb_apply_update(params, update, tensors, lr, h, w_sq, r_sq);
}

}  // namespace ms

#pragma GCC pop_options
