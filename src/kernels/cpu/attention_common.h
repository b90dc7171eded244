// attention_common: what the fp32 and the bf16 flash-attention kernels share (private to cpu/):
// the tile size, the causal / sliding-window band of a query row inside a key tile, the masked
// row max and exponential of the (online) softmax, the shape check.
#pragma once
#include <algorithm>  // std::min, std::max
#include <cmath>      // INFINITY

#include "base/check.h"             // MS_CHECK
#include "kernels/cpu/simd_util.h"  // MS_AI

namespace ms::attention_detail {

constexpr int kTile = 64;  // query and key tile size (rows)

// Columns [lo, hi] (inclusive, relative to key tile start j0) that query row ti may attend.
MS_AI void band(int ti, int j0, int nk, int window, int& lo, int& hi) {
  lo = std::max(0, (window > 0 ? ti - window + 1 : 0) - j0);
  hi = std::min(nk - 1, ti - j0);
}

// The larger of m and the largest score of srow[lo..hi] (a kTile row; the loop is written so that
// it vectorises, which std::max does not).
MS_AI float band_max(const float* srow, int lo, int hi, float m) {
#pragma omp simd reduction(max : m)
  for (int jj = 0; jj < kTile; ++jj) {
    const float v = srow[jj] + (((jj >= lo) & (jj <= hi)) ? 0.0f : -INFINITY);
    m = m > v ? m : v;
  }
  return m;
}

// srow[jj] = exp(srow[jj] - shift) for jj in [lo, hi], 0 elsewhere (a kTile row); returns the sum.
MS_AI float band_exp(float* srow, int lo, int hi, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int jj = 0; jj < kTile; ++jj) {
    const float p = exp_approx(srow[jj] - shift) * (((jj >= lo) & (jj <= hi)) ? 1.0f : 0.0f);
    srow[jj] = p;
    sum += p;
  }
  return sum;
}

inline void check_shapes(int B, int T, int C, int NH, int window) {
  MS_CHECK(B > 0 && T > 0 && C > 0 && NH > 0, "attention: bad shape B={} T={} C={} NH={}", B, T, C, NH);
  MS_CHECK(C % NH == 0, "attention: C={} not divisible by NH={}", C, NH);
  MS_CHECK(window >= 0, "attention: window must be >= 0 (0 = full causal), got {}", window);
}

}  // namespace ms::attention_detail
