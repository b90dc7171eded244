// swiglu.cpp: see swiglu.h. Row kernels written once (always-inline), compiled for AVX-512 and for
// the x86-64-v2 baseline; the choice made once per process.
#include "kernels/swiglu.h"

#include <algorithm>  // std::min
#include <cstddef>    // size_t

#include "base/check.h"             // MS_CHECK
#include "base/kernel_timing.h"     // KernelTimeScope (charged to the MLP activation's rows, gelu_*)
#include "kernels/cpu/simd_util.h"  // MS_AI, MS_TARGET_AVX512, use_avx512, exp_approx

namespace ms {
namespace {

constexpr int kRowChunk = 32;

// sigmoid(x) = 1 / (1 + exp(-x)); the argument capped at 80 keeps 1 + e a normal float.
MS_AI float sigmoid(float x) { return 1.0f / (1.0f + exp_approx(-x, 80.0f)); }
MS_AI void store(float& o, float v) { o = v; }
MS_AI void store(bf16_t& o, float v) { o = f32_to_bf16_rne(v); }

template <class Out>
MS_AI void fwd_rows(Out* out, const float* pre, int r0, int r1, int F) {
  for (int i = r0; i < r1; ++i) {
    const float* g = pre + (size_t)i * 2 * F;
    const float* u = g + F;
    Out* o = out + (size_t)i * F;
#pragma omp simd
    for (int c = 0; c < F; ++c) store(o[c], g[c] * sigmoid(g[c]) * u[c]);
  }
}

// d silu(g) / dg = s (1 + g (1 - s)) with s = sigmoid(g).
MS_AI void bwd_rows(float* dpre, const float* dout, const float* pre, int r0, int r1, int F) {
  for (int i = r0; i < r1; ++i) {
    const float* g = pre + (size_t)i * 2 * F;
    const float* u = g + F;
    const float* d = dout + (size_t)i * F;
    float* dg = dpre + (size_t)i * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int c = 0; c < F; ++c) {
      const float s = sigmoid(g[c]);
      dg[c] = d[c] * u[c] * (s * (1.0f + g[c] * (1.0f - s)));
      du[c] = d[c] * (g[c] * s);
    }
  }
}

MS_TARGET_AVX512 void fwd_avx512(float* out, const float* pre, int r0, int r1, int F) { fwd_rows(out, pre, r0, r1, F); }
void fwd_generic(float* out, const float* pre, int r0, int r1, int F) { fwd_rows(out, pre, r0, r1, F); }
MS_TARGET_AVX512 void fwd16_avx512(bf16_t* out, const float* pre, int r0, int r1, int F) {
  fwd_rows(out, pre, r0, r1, F);
}
void fwd16_generic(bf16_t* out, const float* pre, int r0, int r1, int F) { fwd_rows(out, pre, r0, r1, F); }
MS_TARGET_AVX512 void bwd_avx512(float* dpre, const float* dout, const float* pre, int r0, int r1, int F) {
  bwd_rows(dpre, dout, pre, r0, r1, F);
}
void bwd_generic(float* dpre, const float* dout, const float* pre, int r0, int r1, int F) {
  bwd_rows(dpre, dout, pre, r0, r1, F);
}

// f(r0, r1) over fixed 32-row chunks on the OpenMP threads.
template <class Fn>
void over_rows(int N, int F, const char* what, Fn f) {
  MS_CHECK(N >= 0 && F > 0, "{}: bad shape N={} F={}", what, N, F);
  const int nchunks = (N + kRowChunk - 1) / kRowChunk;
#pragma omp parallel for schedule(static)
  for (int k = 0; k < nchunks; ++k) f(k * kRowChunk, std::min(N, (k + 1) * kRowChunk));
}

}  // namespace

void swiglu_forward(float* out, const float* pre, int N, int F) {
  KernelTimeScope timed(KernelId::kGeluForward);
  const bool avx = use_avx512();
  over_rows(N, F, "swiglu_forward", [&](int r0, int r1) {
    if (avx) fwd_avx512(out, pre, r0, r1, F);
    else fwd_generic(out, pre, r0, r1, F);
  });
}

void swiglu_forward_bf16(bf16_t* out, const float* pre, int N, int F) {
  KernelTimeScope timed(KernelId::kGeluForward);
  const bool avx = use_avx512();
  over_rows(N, F, "swiglu_forward_bf16", [&](int r0, int r1) {
    if (avx) fwd16_avx512(out, pre, r0, r1, F);
    else fwd16_generic(out, pre, r0, r1, F);
  });
}

void swiglu_backward(float* dpre, const float* dout, const float* pre, int N, int F) {
  KernelTimeScope timed(KernelId::kGeluBackward);
  const bool avx = use_avx512();
  over_rows(N, F, "swiglu_backward", [&](int r0, int r1) {
    if (avx) bwd_avx512(dpre, dout, pre, r0, r1, F);
    else bwd_generic(dpre, dout, pre, r0, r1, F);
  });
}

}  // namespace ms
