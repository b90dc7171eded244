// bf16: bfloat16 storage (raw uint16_t bits: the top half of an IEEE float), float -> bf16
// conversion with round-to-nearest-even, and detection of the CPU's bf16 features.
// Guarantees: the scalar and AVX-512F paths are exact RNE for every input (ties to even,
// denormals rounded, not flushed; +-inf kept; NaN stays NaN, made quiet, sign kept). The AVX-512
// BF16 path (VCVTNE2PS2BF16) is the same except that the hardware treats denormal inputs as zero
// (and flushes denormal results to zero): it only differs below 1.2e-38 in magnitude.
// Conversion of large arrays is OpenMP-parallel; results never depend on the thread count.
#pragma once
#include <bit>      // std::bit_cast
#include <cstddef>  // size_t
#include <cstdint>  // uint16_t, uint32_t

namespace ms {

using bf16_t = uint16_t;  // bfloat16 bits

// float -> bf16, round to nearest even (exact for every input; see the header comment).
inline bf16_t f32_to_bf16_rne(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<bf16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);  // ties to even; a carry into the exponent is the right result
  return static_cast<bf16_t>(u >> 16);
}

inline float bf16_to_f32(bf16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Which conversion loop f32_to_bf16 runs. kAuto: AVX-512 BF16 if the CPU has it, else AVX-512F
// (integer rounding) if use_avx512(), else scalar. Forcing a path the CPU lacks is an error.
enum class Bf16Path { kAuto, kScalar, kAvx512, kAvx512Bf16 };

// out[i] = bf16(in[i]) for i < n.
void f32_to_bf16(bf16_t* out, const float* in, size_t n, Bf16Path path = Bf16Path::kAuto);

// out[i] = float(in[i]) for i < n (exact).
void bf16_to_f32(float* out, const bf16_t* in, size_t n);

// CPU features (CPUID, checked once; AMX also needs the OS to enable the tile state in XCR0).
bool cpu_has_avx512_bf16();
bool cpu_has_amx_bf16();

}  // namespace ms
