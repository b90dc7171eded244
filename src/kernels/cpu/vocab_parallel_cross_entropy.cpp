// vocab_parallel_cross_entropy.cpp: see vocab_parallel_cross_entropy.h. Row kernels written once
// (always-inline) and compiled for AVX-512 and the x86-64-v2 baseline, as cross_entropy.cpp.
#include "kernels/vocab_parallel_cross_entropy.h"

#include <algorithm>  // std::min, std::max
#include <cmath>      // std::log, INFINITY
#include <cstring>    // std::memset

#include "base/check.h"             // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope
#include "kernels/cpu/simd_util.h"  // MS_AI, MS_TARGET_AVX512, use_avx512, exp_approx

namespace ms {
namespace {

constexpr int kSumBlock = 1024;  // columns per float partial of the softmax denominator

int real_columns(int V, int Vl, int v0) { return std::max(0, std::min(Vl, V - v0)); }

MS_AI float row_max(const float* x, int valid) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < valid; ++j) mx = mx > x[j] ? mx : x[j];
  return mx;
}

MS_AI float row_sum_exp(const float* x, float mx, int valid) {
  double total = 0.0;
  for (int j0 = 0; j0 < valid; j0 += kSumBlock) {
    const int j1 = std::min(valid, j0 + kSumBlock);
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = j0; j < j1; ++j) s += exp_approx(x[j] - mx);
    total += s;
  }
  return static_cast<float>(total);
}

// d (Vl) = dloss * (exp(x - mx) / sum - onehot); d may alias x.
MS_AI void row_grad(float* d, const float* x, float mx, float sum, int local_target, int valid, int Vl, float dloss) {
  const float scale = dloss / sum;
#pragma omp simd
  for (int j = 0; j < valid; ++j) d[j] = exp_approx(x[j] - mx) * scale;
  if (local_target >= 0) d[local_target] -= dloss;
  for (int j = valid; j < Vl; ++j) d[j] = 0.0f;
}

MS_TARGET_AVX512 float row_max_avx512(const float* x, int valid) { return row_max(x, valid); }
float row_max_generic(const float* x, int valid) { return row_max(x, valid); }
MS_TARGET_AVX512 float row_sum_exp_avx512(const float* x, float mx, int valid) { return row_sum_exp(x, mx, valid); }
float row_sum_exp_generic(const float* x, float mx, int valid) { return row_sum_exp(x, mx, valid); }
MS_TARGET_AVX512 void row_grad_avx512(float* d, const float* x, float mx, float sum, int t, int valid, int Vl, float dl) {
  row_grad(d, x, mx, sum, t, valid, Vl, dl);
}
void row_grad_generic(float* d, const float* x, float mx, float sum, int t, int valid, int Vl, float dl) {
  row_grad(d, x, mx, sum, t, valid, Vl, dl);
}

void check_targets(const int* targets, int N, int V) {
  for (int i = 0; i < N; ++i)
    MS_CHECK(targets[i] >= -1 && targets[i] < V, "vocab-parallel cross_entropy: target {} of row {} outside [-1, {})",
             targets[i], i, V);
}

float row_loss(const float* row_max, const float* sums, int i) {
  return static_cast<float>(std::log(static_cast<double>(sums[2 * i])) + static_cast<double>(row_max[i]) -
                            static_cast<double>(sums[2 * i + 1]));
}

}  // namespace

void vocab_shard_row_max(float* out, const float* logits, const int* targets, int N, int V, int Vl, int v0) {
  KernelTimeScope timed(KernelId::kCrossEntropy);
  MS_CHECK(N >= 0 && V > 0 && Vl > 0 && v0 >= 0, "vocab-parallel cross_entropy: bad shape N={} V={} Vl={} v0={}", N, V, Vl, v0);
  check_targets(targets, N, V);
  const int valid = real_columns(V, Vl, v0);
  const bool avx = use_avx512();
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const float* x = logits + static_cast<size_t>(i) * Vl;
    out[i] = avx ? row_max_avx512(x, valid) : row_max_generic(x, valid);
  }
}

void vocab_shard_sum_exp(float* sums, const float* logits, const float* row_max, const int* targets, int N, int V,
                         int Vl, int v0) {
  KernelTimeScope timed(KernelId::kCrossEntropy);
  const int valid = real_columns(V, Vl, v0);
  const bool avx = use_avx512();
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const float* x = logits + static_cast<size_t>(i) * Vl;
    const int t = targets[i] - v0;
    sums[2 * i] = targets[i] < 0 ? 0.0f : avx ? row_sum_exp_avx512(x, row_max[i], valid) : row_sum_exp_generic(x, row_max[i], valid);
    sums[2 * i + 1] = targets[i] >= 0 && t >= 0 && t < valid ? x[t] : 0.0f;
  }
}

void vocab_shard_loss_grad(float* losses, float* dlogits, const float* logits, const float* row_max,
                           const float* sums, const int* targets, int N, int V, int Vl, int v0, float dloss) {
  KernelTimeScope timed(KernelId::kCrossEntropy);
  const int valid = real_columns(V, Vl, v0);
  const bool avx = use_avx512();
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const size_t o = static_cast<size_t>(i) * Vl;
    if (targets[i] < 0) {
      losses[i] = 0.0f;
      if (dloss != 0.0f) std::memset(dlogits + o, 0, sizeof(float) * Vl);
      continue;
    }
    losses[i] = row_loss(row_max, sums, i);
    if (dloss == 0.0f) continue;
    const int t = targets[i] - v0 >= 0 && targets[i] - v0 < valid ? targets[i] - v0 : -1;
    if (avx) row_grad_avx512(dlogits + o, logits + o, row_max[i], sums[2 * i], t, valid, Vl, dloss);
    else row_grad_generic(dlogits + o, logits + o, row_max[i], sums[2 * i], t, valid, Vl, dloss);
  }
}

void vocab_shard_loss_grad_bf16(float* losses, bf16_t* dlogits, const float* logits, const float* row_max,
                                const float* sums, const int* targets, int N, int V, int Vl, int v0, float dloss) {
  KernelTimeScope timed(KernelId::kCrossEntropy);
  const int valid = real_columns(V, Vl, v0);
  const bool avx = use_avx512();
#pragma omp parallel
  {
    float* scratch = thread_scratch(static_cast<size_t>(Vl));
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const size_t o = static_cast<size_t>(i) * Vl;
      bf16_t* d = dlogits + o;
      if (targets[i] < 0) {
        losses[i] = 0.0f;
        std::memset(d, 0, sizeof(bf16_t) * Vl);
        continue;
      }
      losses[i] = row_loss(row_max, sums, i);
      const int t = targets[i] - v0 >= 0 && targets[i] - v0 < valid ? targets[i] - v0 : -1;
      if (avx) row_grad_avx512(scratch, logits + o, row_max[i], sums[2 * i], t, valid, Vl, dloss);
      else row_grad_generic(scratch, logits + o, row_max[i], sums[2 * i], t, valid, Vl, dloss);
      for (int j = 0; j < Vl; ++j) d[j] = f32_to_bf16_rne(scratch[j]);
    }
  }
}

}  // namespace ms
