// gelu.cpp: see gelu.h. Row kernels are written once (always-inline) and compiled for AVX-512 and
// for the x86-64-v2 baseline; the choice is made once per process.
#include "kernels/gelu.h"

#include <algorithm>  // std::min
#include <bit>        // std::bit_cast
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

constexpr int kRowChunk = 32;  // rows per partial sum of dbias (fixed: determinism)
constexpr int kColBlock = 64;  // columns per task of the cross-chunk reduction
constexpr float kK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kA = 0.044715f;





// e = exp(-2u), u = sqrt(2/pi)(x + 0.044715 x^3); the argument is capped at 80 so that
// sigmoid(2u) = 1/(1+e) stays a normal float (no denormal slow paths for very negative x).
MS_AI float exp_m2u(float x) { return exp_approx(-2.0f * kK * (x + kA * x * x * x), 80.0f); }

MS_AI void store(float& o, float v) { o = v; }
MS_AI void store(bf16_t& o, float v) { o = f32_to_bf16_rne(v); }

// Out: float, or bf16_t (the GeLU output rounded to nearest even on the way out).
template <class Out>
MS_AI void fwd_rows(Out* out, float* pre, const float* bias, int r0, int r1, int C) {
  for (int i = r0; i < r1; ++i) {
    float* x = pre + (size_t)i * C;
    Out* o = out + (size_t)i * C;
    if (bias) {
#pragma omp simd
      for (int c = 0; c < C; ++c) x[c] += bias[c];
    }
#pragma omp simd
    for (int c = 0; c < C; ++c) store(o[c], x[c] / (1.0f + exp_m2u(x[c])));
  }
}

// Rows [r0, r1); db_part (C) receives the chunk's column sums of dpre (overwritten) if non-null.
MS_AI void bwd_rows(float* dpre, float* db_part, const float* dout, const float* pre, int r0, int r1, int C) {
  if (db_part) std::memset(db_part, 0, sizeof(float) * C);
  for (int i = r0; i < r1; ++i) {
    const float* x = pre + (size_t)i * C;
    const float* g = dout + (size_t)i * C;
    float* d = dpre + (size_t)i * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const float xv = x[c];
      const float e = exp_m2u(xv);
      const float s = 1.0f / (1.0f + e);  // sigmoid(2u) = 0.5 (1 + tanh u)
      const float es = e * s;             // 1 - s, without cancellation
      // d/dx [x s(2u)] = s + x * 2 s (1 - s) * du/dx
      const float grad = s + xv * 2.0f * s * es * kK * (1.0f + 3.0f * kA * xv * xv);
      d[c] = g[c] * grad;
    }
    if (db_part) {
#pragma omp simd
      for (int c = 0; c < C; ++c) db_part[c] += d[c];
    }
  }
}

MS_AI void reduce_cols(float* dbias, const float* parts, int nchunks, int c0, int c1, int C) {
  float acc[kColBlock];
  const int n = c1 - c0;
  for (int c = 0; c < n; ++c) acc[c] = 0.0f;
  for (int k = 0; k < nchunks; ++k) {
    const float* p = parts + (size_t)k * C + c0;
#pragma omp simd
    for (int c = 0; c < n; ++c) acc[c] += p[c];
  }
  for (int c = 0; c < n; ++c) dbias[c0 + c] += acc[c];
}

template <class Out>
MS_TARGET_AVX512 void fwd_rows_avx512(Out* out, float* pre, const float* bias, int r0, int r1, int C) {
  fwd_rows(out, pre, bias, r0, r1, C);
}
template <class Out>
void fwd_rows_generic(Out* out, float* pre, const float* bias, int r0, int r1, int C) {
  fwd_rows(out, pre, bias, r0, r1, C);
}

template <class Out>
void forward(Out* out, float* pre, const float* bias, int N, int C) {
  const bool avx = use_avx512();
  const int nchunks = (N + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for schedule(static)
  for (int k = 0; k < nchunks; ++k) {
    const int r0 = k * kRowChunk, r1 = std::min(N, r0 + kRowChunk);
    if (avx) fwd_rows_avx512(out, pre, bias, r0, r1, C);
    else fwd_rows_generic(out, pre, bias, r0, r1, C);
  }
}
MS_TARGET_AVX512 void bwd_rows_avx512(float* dpre, float* db_part, const float* dout, const float* pre, int r0,
                                      int r1, int C) {
  bwd_rows(dpre, db_part, dout, pre, r0, r1, C);
}
void bwd_rows_generic(float* dpre, float* db_part, const float* dout, const float* pre, int r0, int r1, int C) {
  bwd_rows(dpre, db_part, dout, pre, r0, r1, C);
}
MS_TARGET_AVX512 void reduce_cols_avx512(float* dbias, const float* parts, int nchunks, int c0, int c1, int C) {
  reduce_cols(dbias, parts, nchunks, c0, c1, C);
}
void reduce_cols_generic(float* dbias, const float* parts, int nchunks, int c0, int c1, int C) {
  reduce_cols(dbias, parts, nchunks, c0, c1, C);
}

}  // namespace

void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int C) {
  KernelTimeScope timed(KernelId::kGeluForward);
  MS_CHECK(N >= 0 && C > 0, "bias_gelu_forward: bad shape N={} C={}", N, C);
  MS_CHECK(out != pre, "bias_gelu_forward: out must not alias pre (pre is kept for the backward)");
  forward(out, pre, bias, N, C);
}

void bias_gelu_forward_bf16(bf16_t* out, float* pre, const float* bias, int N, int C) {
  KernelTimeScope timed(KernelId::kGeluForward);
  MS_CHECK(N >= 0 && C > 0, "bias_gelu_forward_bf16: bad shape N={} C={}", N, C);
  forward(out, pre, bias, N, C);
}

void bias_gelu_backward(float* dpre, float* dbias, const float* dout, const float* pre, int N, int C) {
  KernelTimeScope timed(KernelId::kGeluBackward);
  MS_CHECK(N >= 0 && C > 0, "bias_gelu_backward: bad shape N={} C={}", N, C);
  const bool avx = use_avx512();
  const int nchunks = (N + kRowChunk - 1) / kRowChunk;
  float* parts = dbias ? thread_scratch((size_t)nchunks * C) : nullptr;  // [chunk][C]
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int k = 0; k < nchunks; ++k) {
      const int r0 = k * kRowChunk, r1 = std::min(N, r0 + kRowChunk);
      float* pb = parts ? parts + (size_t)k * C : nullptr;
      if (avx) bwd_rows_avx512(dpre, pb, dout, pre, r0, r1, C);
      else bwd_rows_generic(dpre, pb, dout, pre, r0, r1, C);
    }
    if (dbias) {
      const int nblocks = (C + kColBlock - 1) / kColBlock;
#pragma omp for schedule(static)
      for (int blk = 0; blk < nblocks; ++blk) {
        const int c0 = blk * kColBlock, c1 = std::min(C, c0 + kColBlock);
        if (avx) reduce_cols_avx512(dbias, parts, nchunks, c0, c1, C);
        else reduce_cols_generic(dbias, parts, nchunks, c0, c1, C);
      }
    }
  }
}

}  // namespace ms
