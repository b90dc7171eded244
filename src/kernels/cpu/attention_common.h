// attention_common: what the fp32 and the bf16 flash-attention kernels share (private to cpu/):
// the tile size, the causal / sliding-window band of a query row inside a key tile, the row steps
// of the online softmax (forward) and of its gradient (backward), the shape check, and the loop
// that runs one task per (b, h) with per-thread scratch.
#pragma once
#include <algorithm>  // std::min, std::max
#include <cmath>      // INFINITY, std::log
#include <cstddef>    // size_t
#include <cstring>    // std::memset

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

// One query row's online-softmax step over one key tile (FlashAttention-2): the row's scores become
// exp(s - m_new) in [lo, hi] and 0 elsewhere (all 0 when the band is empty: m, l, orow untouched);
// the running max m and sum l are updated and the output accumulator row (width floats) is rescaled
// by exp(m_old - m_new). add_sum = false leaves the tile's sum out of l (the bf16 kernel adds the sum
// of the rounded probabilities its product uses instead).
MS_AI void online_softmax_row(float* srow, int lo, int hi, float& m, float& l, float* orow, int width,
                              bool add_sum) {
  if (hi < lo) {  // the whole row is masked in this tile
    std::memset(srow, 0, sizeof(float) * kTile);
    return;
  }
  const float mx = band_max(srow, lo, hi, m);
  const float sum = band_exp(srow, lo, hi, mx);
  const float corr = exp_approx(m - mx);  // 0 on the first visited tile (m = -inf)
  l = add_sum ? l * corr + sum : l * corr;
  m = mx;
  if (corr != 1.0f) {
#pragma omp simd
    for (int d = 0; d < width; ++d) orow[d] *= corr;
  }
}

// The end of a query row: o (HS floats) = orow / l, *lse = m + log(l).
MS_AI void finish_row(float* o, const float* orow, int HS, float m, float l, float* lse) {
  const float inv = 1.0f / l;
#pragma omp simd
  for (int d = 0; d < HS; ++d) o[d] = orow[d] * inv;
  *lse = m + std::log(l);
}

// The sum of a[d] * b[d] over d < n, vectorised (the backward's D_i = rowsum(dout_i * out_i)).
MS_AI float row_dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// A row of the softmax gradient: dsrow (dP on entry) = prow * (dP - D) over a kTile row.
MS_AI void softmax_grad_row(float* dsrow, const float* prow, float D) {
#pragma omp simd
  for (int jj = 0; jj < kTile; ++jj) dsrow[jj] = prow[jj] * (dsrow[jj] - D);
}

// task(b, h, scratch) for every (b, h) of B x NH on the OpenMP threads, one head per task (dynamic
// schedule), each thread with its own scratch of scratch_n floats. A head is one thread's, start to
// end, so results do not depend on the thread count.
template <class F>
void parallel_over_heads(int B, int NH, size_t scratch_n, F task) {
  const int BH = B * NH;
#pragma omp parallel
  {
    float* scratch = thread_scratch(scratch_n);
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < BH; ++bh) task(bh / NH, bh % NH, scratch);
  }
}

inline void check_shapes(int B, int T, int C, int NH, int NKV, int window) {
  MS_CHECK(B > 0 && T > 0 && C > 0 && NH > 0, "attention: bad shape B={} T={} C={} NH={}", B, T, C, NH);
  MS_CHECK(C % NH == 0, "attention: C={} not divisible by NH={}", C, NH);
  MS_CHECK(NKV > 0 && NH % NKV == 0, "attention: NH={} query heads are not a multiple of NKV={} key/value heads", NH,
           NKV);
  MS_CHECK(window >= 0, "attention: window must be >= 0 (0 = full causal), got {}", window);
}

}  // namespace ms::attention_detail
