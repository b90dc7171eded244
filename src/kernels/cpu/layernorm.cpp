// layernorm.cpp: see layernorm.h. Row kernels are written once (always-inline) and compiled for
// AVX-512 and for the x86-64-v2 baseline; the choice is made once per process.
#include "kernels/layernorm.h"

#include <algorithm>  // std::min
#include <cmath>      // std::sqrt
#include <cstddef>    // size_t
#include <cstdlib>    // std::getenv
#include <cstring>    // std::memset
#include <string_view>

#include "base/aligned.h"  // AlignedBuffer
#include "base/check.h"  // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope
#include "kernels/cpu/simd_util.h"  // MS_AI, MS_TARGET_AVX512, use_avx512, thread_scratch, exp_approx


namespace ms {
namespace {

constexpr int kRowChunk = 32;  // rows per partial sum of dweight/dbias (fixed: determinism)
constexpr int kColBlock = 64;  // columns per task of the cross-chunk reduction



MS_AI void fwd_rows(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                    const float* bias, int r0, int r1, int C, float eps) {
  for (int i = r0; i < r1; ++i) {
    const float* x = inp + (size_t)i * C;
    float* o = out + (size_t)i * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; ++c) s += x[c];
    const float m = s / C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    const float r = 1.0f / std::sqrt(v / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * r * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

// Rows [r0, r1) of one chunk; dw_part/db_part (C) receive the chunk's partial sums (overwritten).
MS_AI void bwd_rows(float* dinp, float* dw_part, float* db_part, const float* dout, const float* inp,
                    const float* weight, const float* mean, const float* rstd, int r0, int r1, int C) {
  std::memset(dw_part, 0, sizeof(float) * C);
  std::memset(db_part, 0, sizeof(float) * C);
  for (int i = r0; i < r1; ++i) {
    const float* x = inp + (size_t)i * C;
    const float* g = dout + (size_t)i * C;
    float* dx = dinp + (size_t)i * C;
    const float m = mean[i], r = rstd[i];
    float dn_mean = 0.0f, dnn_mean = 0.0f;
#pragma omp simd reduction(+ : dn_mean, dnn_mean)
    for (int c = 0; c < C; ++c) {
      const float dn = weight[c] * g[c];
      dn_mean += dn;
      dnn_mean += dn * ((x[c] - m) * r);
    }
    dn_mean /= C;
    dnn_mean /= C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const float norm = (x[c] - m) * r;
      const float dn = weight[c] * g[c];
      dw_part[c] += norm * g[c];
      db_part[c] += g[c];
      dx[c] += r * (dn - dn_mean - norm * dnn_mean);
    }
  }
}

// dweight[c] += sum over chunks (in order) of parts[k][c], for columns [c0, c1).
MS_AI void reduce_cols(float* dweight, float* dbias, const float* parts, int nchunks, int c0, int c1, int C) {
  float aw[kColBlock], ab[kColBlock];
  const int n = c1 - c0;
  for (int c = 0; c < n; ++c) aw[c] = ab[c] = 0.0f;
  for (int k = 0; k < nchunks; ++k) {
    const float* pw = parts + (size_t)k * 2 * C + c0;
    const float* pb = pw + C;
#pragma omp simd
    for (int c = 0; c < n; ++c) { aw[c] += pw[c]; ab[c] += pb[c]; }
  }
  for (int c = 0; c < n; ++c) { dweight[c0 + c] += aw[c]; dbias[c0 + c] += ab[c]; }
}

MS_TARGET_AVX512 void fwd_rows_avx512(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                      const float* bias, int r0, int r1, int C, float eps) {
  fwd_rows(out, mean, rstd, inp, weight, bias, r0, r1, C, eps);
}
void fwd_rows_generic(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int r0, int r1, int C, float eps) {
  fwd_rows(out, mean, rstd, inp, weight, bias, r0, r1, C, eps);
}
MS_TARGET_AVX512 void bwd_rows_avx512(float* dinp, float* dw_part, float* db_part, const float* dout,
                                      const float* inp, const float* weight, const float* mean,
                                      const float* rstd, int r0, int r1, int C) {
  bwd_rows(dinp, dw_part, db_part, dout, inp, weight, mean, rstd, r0, r1, C);
}
void bwd_rows_generic(float* dinp, float* dw_part, float* db_part, const float* dout, const float* inp,
                      const float* weight, const float* mean, const float* rstd, int r0, int r1, int C) {
  bwd_rows(dinp, dw_part, db_part, dout, inp, weight, mean, rstd, r0, r1, C);
}
MS_TARGET_AVX512 void reduce_cols_avx512(float* dweight, float* dbias, const float* parts, int nchunks, int c0,
                                         int c1, int C) {
  reduce_cols(dweight, dbias, parts, nchunks, c0, c1, C);
}
void reduce_cols_generic(float* dweight, float* dbias, const float* parts, int nchunks, int c0, int c1, int C) {
  reduce_cols(dweight, dbias, parts, nchunks, c0, c1, C);
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
  KernelTimeScope timed(KernelId::kLayerNormForward);
  MS_CHECK(N >= 0 && C > 0, "layernorm_forward: bad shape N={} C={}", N, C);
  const bool avx = use_avx512();
  const int nchunks = (N + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for schedule(static)
  for (int k = 0; k < nchunks; ++k) {
    const int r0 = k * kRowChunk, r1 = std::min(N, r0 + kRowChunk);
    if (avx) fwd_rows_avx512(out, mean, rstd, inp, weight, bias, r0, r1, C, eps);
    else fwd_rows_generic(out, mean, rstd, inp, weight, bias, r0, r1, C, eps);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  KernelTimeScope timed(KernelId::kLayerNormBackward);
  MS_CHECK(N >= 0 && C > 0, "layernorm_backward: bad shape N={} C={}", N, C);
  const bool avx = use_avx512();
  const int nchunks = (N + kRowChunk - 1) / kRowChunk;
  float* parts = thread_scratch((size_t)nchunks * 2 * C);  // [chunk][dweight | dbias]
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int k = 0; k < nchunks; ++k) {
      const int r0 = k * kRowChunk, r1 = std::min(N, r0 + kRowChunk);
      float* pw = parts + (size_t)k * 2 * C;
      if (avx) bwd_rows_avx512(dinp, pw, pw + C, dout, inp, weight, mean, rstd, r0, r1, C);
      else bwd_rows_generic(dinp, pw, pw + C, dout, inp, weight, mean, rstd, r0, r1, C);
    }
    const int nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; ++blk) {
      const int c0 = blk * kColBlock, c1 = std::min(C, c0 + kColBlock);
      if (avx) reduce_cols_avx512(dweight, dbias, parts, nchunks, c0, c1, C);
      else reduce_cols_generic(dweight, dbias, parts, nchunks, c0, c1, C);
    }
  }
}

}  // namespace ms
