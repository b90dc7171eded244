// simd_util: what the fused kernels share: the always-inline / AVX-512 target attributes (each hot
// loop is written once as an always-inline template and compiled for AVX-512 and for the
// x86-64-v2 baseline), the once-per-process ISA choice (MS_KERNEL_ISA=generic forces the
// baseline), per-thread scratch grown once (no allocation on the hot path after warm-up), and a
// vectorisable exp.
#pragma once
#include <bit>      // std::bit_cast
#include <cstddef>  // size_t

#include "base/aligned.h"  // AlignedBuffer

#define MS_AI inline __attribute__((always_inline))
#define MS_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,prefer-vector-width=512")))

namespace ms {

// True when the AVX-512 kernels run: the CPU has AVX-512 F/VL/BW/DQ and FMA, and MS_KERNEL_ISA is
// not "generic". Decided once per process.
bool use_avx512();

// Per-thread scratch of at least n floats, grown once (never shrinks). Kernels do not nest, so one
// buffer per thread serves them all.
inline float* thread_scratch(size_t n) {
  thread_local AlignedBuffer<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
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

}  // namespace ms
