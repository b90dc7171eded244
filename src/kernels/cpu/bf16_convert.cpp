// bf16_convert.cpp: float <-> bf16 conversion loops (see kernels/bf16_convert.h).
#include "kernels/bf16_convert.h"

#include <immintrin.h>  // AVX-512 / AVX-512 BF16 intrinsics

#include <algorithm>  // std::min

#include "base/check.h"       // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope
#include "base/cpu_features.h"  // cpu_has_avx512_bf16
#include "kernels/cpu/simd_util.h"   // use_avx512, MS_TARGET_AVX512

// GCC 12 warns falsely inside its own AVX-512 shift intrinsics (an intentionally undefined lane).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace ms {

namespace {

// Conversions are memory-bound; split big arrays into per-thread chunks of whole 64-byte lines.
constexpr size_t kParallelMin = 1 << 16;

void convert_scalar(bf16_t* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; i++) out[i] = f32_to_bf16_rne(in[i]);
}

MS_TARGET_AVX512 void convert_avx512(bf16_t* out, const float* in, size_t n) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF);
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i quiet = _mm512_set1_epi32(0x0040);
  size_t i = 0;
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF)
                                    : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512i u = _mm512_maskz_loadu_epi32(m, in + i);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), quiet));
    _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtepi32_epi16(r));
  }
}

__attribute__((target("avx512f,avx512vl,avx512bw,avx512bf16")))
void convert_avx512bf16(bf16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + i + 16), _mm512_loadu_ps(in + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<const __m512i&>(v));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF)
                                    : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, in + i));
    _mm256_mask_storeu_epi16(out + i, m, reinterpret_cast<const __m256i&>(v));
  }
}

using ConvertFn = void (*)(bf16_t*, const float*, size_t);

ConvertFn pick(Bf16Path path) {
  if (path == Bf16Path::kAuto)
    path = cpu_has_avx512_bf16() && use_avx512() ? Bf16Path::kAvx512Bf16
           : use_avx512()                        ? Bf16Path::kAvx512
                                                 : Bf16Path::kScalar;
  switch (path) {
    case Bf16Path::kAvx512Bf16:
      MS_CHECK(cpu_has_avx512_bf16(), "f32_to_bf16: this CPU has no AVX-512 BF16");
      return convert_avx512bf16;
    case Bf16Path::kAvx512:
      MS_CHECK(use_avx512(), "f32_to_bf16: AVX-512 is not available (or MS_KERNEL_ISA=generic)");
      return convert_avx512;
    default:
      return convert_scalar;
  }
}

}  // namespace

void f32_to_bf16(bf16_t* out, const float* in, size_t n, Bf16Path path) {
  KernelTimeScope timed(KernelId::kBf16Convert);
  const ConvertFn fn = pick(path);
  if (n < kParallelMin) { fn(out, in, n); return; }
  constexpr size_t kChunk = 1 << 14;  // elements; a multiple of 32
  const size_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (size_t c = 0; c < nchunks; c++) {
    const size_t i0 = c * kChunk;
    fn(out + i0, in + i0, std::min(kChunk, n - i0));
  }
}

void bf16_to_f32(float* out, const bf16_t* in, size_t n) {
  KernelTimeScope timed(KernelId::kBf16Convert);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (size_t i = 0; i < n; i++) out[i] = bf16_to_f32(in[i]);
}

}  // namespace ms
