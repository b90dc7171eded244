// cross_entropy.cpp: see cross_entropy.h. The row kernel is written once (always-inline) and
// compiled for AVX-512 and for the x86-64-v2 baseline; the choice is made once per process.
#include "cross_entropy.h"

#include <algorithm>  // std::max, std::min
#include <bit>        // std::bit_cast
#include <cmath>      // std::log, INFINITY
#include <cstddef>    // size_t
#include <cstdlib>    // std::getenv
#include <cstring>    // std::memset
#include <string_view>

#include "check.h"  // MS_CHECK

#define MS_AI inline __attribute__((always_inline))
#define MS_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,prefer-vector-width=512")))

namespace ms {
namespace {

constexpr int kSumBlock = 1024;  // columns per float partial of the softmax denominator

bool use_avx512() {
  static const bool v = [] {
    const char* e = std::getenv("MS_KERNEL_ISA");
    if (e && std::string_view(e) == "generic") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma");
  }();
  return v;
}

// Monotonic integer key of a float's bits (an involution): float order == signed int order of keys
// (NaNs sort beyond the infinities).
MS_AI int float_key(int bits) { return bits ^ ((bits >> 31) & 0x7FFFFFFF); }

// exp(min(x, cap)) with <= 1.4 ulp error (Cephes expf polynomial) for -87 < x < 88.3; 0 below -88
// (incl. -inf), ~2.2e38 above 88.3, NaN for NaN. The clamps are integer min/max on float_key, not
// float selects: with trapping math, GCC would otherwise split the computation along the clamp
// branches and the loop would not vectorise on the baseline ISA (no AVX-512 masking).
MS_AI float exp_approx(float x, float cap = 88.3f) {
  const int lo = float_key(std::bit_cast<int>(-88.0f)), hi = float_key(std::bit_cast<int>(cap));
  int k = float_key(std::bit_cast<int>(x));
  k = k < lo ? lo : k;
  k = k > hi ? hi : k;
  const float xc = std::bit_cast<float>(float_key(k));
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  int e = static_cast<int>(n) + 127;  // biased exponent of 2^n; 0 (the float 0) when n <= -127
  e = e < 0 ? 0 : e;
  return p * std::bit_cast<float>(e << 23) + (x != x ? x : 0.0f);  // NaN in, NaN out
}

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

}  // namespace

void softmax_cross_entropy_forward_backward(float* losses, float* dlogits, const float* logits,
                                            const int* targets, int N, int V, int Vp, float dloss) {
  MS_CHECK(N >= 0 && V > 0 && Vp >= V, "cross_entropy: bad shape N={} V={} Vp={}", N, V, Vp);
  for (int i = 0; i < N; ++i)
    MS_CHECK(targets[i] >= -1 && targets[i] < V, "cross_entropy: target {} of row {} outside [-1, {})",
             targets[i], i, V);
  const bool avx = use_avx512();
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    if (avx) rows_avx512(losses, dlogits, logits, targets, i, i + 1, V, Vp, dloss);
    else rows_generic(losses, dlogits, logits, targets, i, i + 1, V, Vp, dloss);
  }
}

}  // namespace ms
