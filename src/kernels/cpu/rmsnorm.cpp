// rmsnorm.cpp: see rmsnorm.h. Written like layernorm.cpp: row kernels once (always-inline),
// compiled for AVX-512 and for the x86-64-v2 baseline, the choice made once per process; the
// weight gradient is summed per fixed 32-row chunk, then the chunks in order.
#include "kernels/rmsnorm.h"

#include <algorithm>  // std::min
#include <cmath>      // std::sqrt
#include <cstddef>    // size_t
#include <cstring>    // std::memset

#include "base/check.h"             // MS_CHECK
#include "base/kernel_timing.h"     // KernelTimeScope (charged to the LayerNorm rows: the block's norm)
#include "kernels/cpu/simd_util.h"  // MS_AI, MS_TARGET_AVX512, use_avx512, thread_scratch

namespace ms {
namespace {

constexpr int kRowChunk = 32;  // rows per partial sum of dweight (fixed: determinism)
constexpr int kColBlock = 64;  // columns per task of the cross-chunk reduction

MS_AI void fwd_rows(float* out, float* rstd, const float* inp, const float* weight, int r0, int r1, int C,
                    float eps) {
  for (int i = r0; i < r1; ++i) {
    const float* x = inp + (size_t)i * C;
    float* o = out + (size_t)i * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const float r = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = x[c] * r * weight[c];
    rstd[i] = r;
  }
}

// Rows [r0, r1) of one chunk; dw_part (C) receives the chunk's partial sums (overwritten).
// y = x r w with r = (mean(x^2) + eps)^(-1/2): dx = r (w g) - x r^3 mean(w g x).
MS_AI void bwd_rows(float* dinp, float* dw_part, const float* dout, const float* inp, const float* weight,
                    const float* rstd, int r0, int r1, int C) {
  std::memset(dw_part, 0, sizeof(float) * C);
  for (int i = r0; i < r1; ++i) {
    const float* x = inp + (size_t)i * C;
    const float* g = dout + (size_t)i * C;
    float* dx = dinp + (size_t)i * C;
    const float r = rstd[i];
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; ++c) dot += weight[c] * g[c] * x[c];
    const float k = dot / C * r * r;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      dw_part[c] += x[c] * r * g[c];
      dx[c] += r * (weight[c] * g[c] - x[c] * k);
    }
  }
}

MS_AI void reduce_cols(float* dweight, const float* parts, int nchunks, int c0, int c1, int C) {
  float aw[kColBlock];
  const int n = c1 - c0;
  for (int c = 0; c < n; ++c) aw[c] = 0.0f;
  for (int k = 0; k < nchunks; ++k) {
    const float* pw = parts + (size_t)k * C + c0;
#pragma omp simd
    for (int c = 0; c < n; ++c) aw[c] += pw[c];
  }
  for (int c = 0; c < n; ++c) dweight[c0 + c] += aw[c];
}

MS_TARGET_AVX512 void fwd_rows_avx512(float* out, float* rstd, const float* inp, const float* weight, int r0, int r1,
                                      int C, float eps) {
  fwd_rows(out, rstd, inp, weight, r0, r1, C, eps);
}
void fwd_rows_generic(float* out, float* rstd, const float* inp, const float* weight, int r0, int r1, int C,
                      float eps) {
  fwd_rows(out, rstd, inp, weight, r0, r1, C, eps);
}
MS_TARGET_AVX512 void bwd_rows_avx512(float* dinp, float* dw_part, const float* dout, const float* inp,
                                      const float* weight, const float* rstd, int r0, int r1, int C) {
  bwd_rows(dinp, dw_part, dout, inp, weight, rstd, r0, r1, C);
}
void bwd_rows_generic(float* dinp, float* dw_part, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int r0, int r1, int C) {
  bwd_rows(dinp, dw_part, dout, inp, weight, rstd, r0, r1, C);
}
MS_TARGET_AVX512 void reduce_cols_avx512(float* dweight, const float* parts, int nchunks, int c0, int c1, int C) {
  reduce_cols(dweight, parts, nchunks, c0, c1, C);
}
void reduce_cols_generic(float* dweight, const float* parts, int nchunks, int c0, int c1, int C) {
  reduce_cols(dweight, parts, nchunks, c0, c1, C);
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps) {
  KernelTimeScope timed(KernelId::kLayerNormForward);
  MS_CHECK(N >= 0 && C > 0 && eps >= 0.0f, "rmsnorm_forward: bad shape N={} C={} or eps={}", N, C, eps);
  const bool avx = use_avx512();
  const int nchunks = (N + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for schedule(static)
  for (int k = 0; k < nchunks; ++k) {
    const int r0 = k * kRowChunk, r1 = std::min(N, r0 + kRowChunk);
    if (avx) fwd_rows_avx512(out, rstd, inp, weight, r0, r1, C, eps);
    else fwd_rows_generic(out, rstd, inp, weight, r0, r1, C, eps);
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C) {
  KernelTimeScope timed(KernelId::kLayerNormBackward);
  MS_CHECK(N >= 0 && C > 0, "rmsnorm_backward: bad shape N={} C={}", N, C);
  const bool avx = use_avx512();
  const int nchunks = (N + kRowChunk - 1) / kRowChunk;
  float* parts = thread_scratch((size_t)nchunks * C);
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int k = 0; k < nchunks; ++k) {
      const int r0 = k * kRowChunk, r1 = std::min(N, r0 + kRowChunk);
      float* pw = parts + (size_t)k * C;
      if (avx) bwd_rows_avx512(dinp, pw, dout, inp, weight, rstd, r0, r1, C);
      else bwd_rows_generic(dinp, pw, dout, inp, weight, rstd, r0, r1, C);
    }
    const int nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp for schedule(static)
    for (int blk = 0; blk < nblocks; ++blk) {
      const int c0 = blk * kColBlock, c1 = std::min(C, c0 + kColBlock);
      if (avx) reduce_cols_avx512(dweight, parts, nchunks, c0, c1, C);
      else reduce_cols_generic(dweight, parts, nchunks, c0, c1, C);
    }
  }
}

}  // namespace ms
