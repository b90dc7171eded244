// grad_norm.cpp: see grad_norm.h.
#include "optim/grad_norm.h"
#include "optim/optim_simd.h"  // optim_simd_active
#include "optim/work_split.h"  // optim_detail::split_point, num_blocks

#include <cmath>    // std::sqrt, std::isnan
#include <cstdint>  // uint32_t
#include <cstring>  // std::memcpy
#include <limits>   // quiet_NaN

#include <omp.h>

#include "base/kernel_timing.h"  // KernelTimeScope
#include "kernels/optim_kernels.h"  // cuda_optim_kernels
#include "optim/param_tensor.h"  // optim_detail::num_blocks, block_begin, split_point

// No a*b+c contraction into fma: results must not depend on the target ISA.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

namespace ms {
namespace optim_detail {

void sq_accum8(const float* x, size_t n, double acc[8]) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const double d = x[i + j];
      acc[j] += d * d;
    }
  for (int j = 0; i < n; ++i, ++j) {
    const double d = x[i];
    acc[j] += d * d;
  }
}

double lanes_total(const double acc[8]) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

}  // namespace optim_detail

double grad_sq_sum(const float* g, size_t n) {
  KernelTimeScope timed(KernelId::kGradNorm);
  using namespace optim_detail;
  const size_t nb = num_blocks(n);
  double part[kMaxBlocks];
#pragma omp parallel for schedule(static) if (nb > 1)
  for (size_t b = 0; b < nb; ++b) {
    const size_t lo = block_begin(n, nb, b), hi = block_begin(n, nb, b + 1);
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    sq_accum8(g + lo, hi - lo, acc);
    part[b] = lanes_total(acc);
  }
  double s = 0;
  for (size_t b = 0; b < nb; ++b) s += part[b];
  return s;
}

double grad_sq_sum(const float* g, size_t n, Device d) {
  return d == Device::kCuda ? cuda_optim_kernels().sum_squares(g, n) : grad_sq_sum(g, n);
}

double grad_l2_norm(const float* g, size_t n) { return std::sqrt(grad_sq_sum(g, n)); }

float clip_scale(double total_norm, float max_norm) {
  if (!(max_norm > 0)) return 1.0f;
  const double coef = static_cast<double>(max_norm) / (total_norm + 1e-6);
  if (std::isnan(coef)) return std::numeric_limits<float>::quiet_NaN();
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

void scale_inplace(float* g, size_t n, float s) {
  KernelTimeScope timed(KernelId::kGradNorm);
  if (s == 1.0f) return;
#pragma omp parallel if (n > optim_detail::kMinBlock)
  {
    const size_t nth = omp_get_num_threads(), ith = omp_get_thread_num();
    const size_t lo = optim_detail::split_point(n, nth, ith), hi = optim_detail::split_point(n, nth, ith + 1);
    for (size_t i = lo; i < hi; ++i) g[i] *= s;
  }
}

bool all_finite(const float* x, size_t n) {
  KernelTimeScope timed(KernelId::kGradNorm);
  using namespace optim_detail;
  const size_t nb = num_blocks(n);
  unsigned bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (nb > 1)
  for (size_t b = 0; b < nb; ++b) {
    const size_t lo = block_begin(n, nb, b), hi = block_begin(n, nb, b + 1);
    unsigned blk = 0;
    for (size_t i = lo; i < hi; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, sizeof bits);
      blk |= static_cast<unsigned>((bits & 0x7f800000u) == 0x7f800000u);  // exponent all ones
    }
    bad |= blk;
  }
  return bad == 0;
}

}  // namespace ms

#pragma GCC pop_options
