// cross_entropy.cpp: see cross_entropy.h. The row kernel is written once (always-inline) and
// compiled for AVX-512 and for the x86-64-v2 baseline; the choice is made once per process.
#include "kernels/cross_entropy.h"

#include <algorithm>  // std::max, std::min
#include <bit>        // std::bit_cast
#include <cmath>      // std::log, INFINITY
#include <cstddef>    // size_t
#include <cstdlib>    // std::getenv
#include <cstring>    // std::memset
#include <string_view>

#include "base/check.h"  // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope
#include "kernels/cpu/simd_util.h"  // MS_AI, MS_TARGET_AVX512, use_avx512, thread_scratch, exp_approx


namespace ms {
namespace {

constexpr int kSumBlock = 1024;  // columns per float partial of the softmax denominator




// One row. x and d may be the same array (every element is read before it is written).
MS_AI void row(float* loss, float* d, const float* x, int target, int V, int Vp, float dloss) {
  if (target < 0) {
    *loss = 0.0f;
    if (d) std::memset(d, 0, sizeof(float) * Vp);
    return;
  }
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < V; ++j) mx = mx > x[j] ? mx : x[j];  // (std::max does not vectorise here)
  const float xt = x[target];
  double total = 0.0;
  for (int j0 = 0; j0 < V; j0 += kSumBlock) {
    const int j1 = std::min(V, j0 + kSumBlock);
    float s = 0.0f;
    if (d) {
#pragma omp simd reduction(+ : s)
      for (int j = j0; j < j1; ++j) {
        const float e = exp_approx(x[j] - mx);
        d[j] = e;
        s += e;
      }
    } else {
#pragma omp simd reduction(+ : s)
      for (int j = j0; j < j1; ++j) s += exp_approx(x[j] - mx);
    }
    total += s;
  }
  *loss = (float)(std::log(total) + (double)mx - (double)xt);
  if (d) {
    const float scale = (float)(dloss / total);
#pragma omp simd
    for (int j = 0; j < V; ++j) d[j] *= scale;
    d[target] -= dloss;
    for (int j = V; j < Vp; ++j) d[j] = 0.0f;
  }
}

// bf16 gradient: the fp32 row goes through scratch (L2-resident), rounded on the way out.
MS_AI void row_bf16(float* loss, bf16_t* d16, float* scratch, const float* x, int target, int V, int Vp, float dloss) {
  row(loss, target < 0 ? nullptr : scratch, x, target, V, Vp, dloss);
  if (target < 0) {
    std::memset(d16, 0, sizeof(bf16_t) * Vp);
    return;
  }
#pragma omp simd
  for (int j = 0; j < Vp; ++j) d16[j] = f32_to_bf16_rne(scratch[j]);
}

MS_TARGET_AVX512 void rows_bf16_avx512(float* losses, bf16_t* d16, float* scratch, const float* logits,
                                       const int* targets, int i, int V, int Vp, float dloss) {
  row_bf16(losses + i, d16 + (size_t)i * Vp, scratch, logits + (size_t)i * Vp, targets[i], V, Vp, dloss);
}
void rows_bf16_generic(float* losses, bf16_t* d16, float* scratch, const float* logits, const int* targets, int i,
                       int V, int Vp, float dloss) {
  row_bf16(losses + i, d16 + (size_t)i * Vp, scratch, logits + (size_t)i * Vp, targets[i], V, Vp, dloss);
}

MS_TARGET_AVX512 void rows_avx512(float* losses, float* dlogits, const float* logits, const int* targets,
                                  int r0, int r1, int V, int Vp, float dloss) {
  for (int i = r0; i < r1; ++i)
    row(losses + i, dlogits ? dlogits + (size_t)i * Vp : nullptr, logits + (size_t)i * Vp, targets[i], V, Vp,
        dloss);
}
void rows_generic(float* losses, float* dlogits, const float* logits, const int* targets, int r0, int r1,
                  int V, int Vp, float dloss) {
  for (int i = r0; i < r1; ++i)
    row(losses + i, dlogits ? dlogits + (size_t)i * Vp : nullptr, logits + (size_t)i * Vp, targets[i], V, Vp,
        dloss);
}

// Shape and targets, before any work.
void check_args(const int* targets, int N, int V, int Vp) {
  MS_CHECK(N >= 0 && V > 0 && Vp >= V, "cross_entropy: bad shape N={} V={} Vp={}", N, V, Vp);
  for (int i = 0; i < N; ++i)
    MS_CHECK(targets[i] >= -1 && targets[i] < V, "cross_entropy: target {} of row {} outside [-1, {})",
             targets[i], i, V);
}

}  // namespace

void softmax_cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits,
                                            const int* targets, int N, int V, int Vp, float dloss) {
  KernelTimeScope timed(KernelId::kCrossEntropy);
  check_args(targets, N, V, Vp);
  const bool avx = use_avx512();
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    if (avx) rows_avx512(losses, dlogits, logits, targets, i, i + 1, V, Vp, dloss);
    else rows_generic(losses, dlogits, logits, targets, i, i + 1, V, Vp, dloss);
  }
}

void softmax_cross_entropy_forward_backward_bf16(float* losses, bf16_t* dlogits_bf16, const float* logits,
                                                 const int* targets, int N, int V, int Vp, float dloss) {
  KernelTimeScope timed(KernelId::kCrossEntropy);
  check_args(targets, N, V, Vp);
  const bool avx = use_avx512();
#pragma omp parallel
  {
    float* scratch = thread_scratch(static_cast<size_t>(Vp));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      if (avx) rows_bf16_avx512(losses, dlogits_bf16, scratch, logits, targets, i, V, Vp, dloss);
      else rows_bf16_generic(losses, dlogits_bf16, scratch, logits, targets, i, V, Vp, dloss);
    }
  }
}

}  // namespace ms
