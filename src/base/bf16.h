// bf16: bfloat16 storage (raw uint16_t bits: the top half of an IEEE float) and the scalar
// conversions. Guarantees: f32_to_bf16_rne is exact round-to-nearest-even for every input (ties to
// even, denormals rounded, not flushed; +-inf kept; NaN stays NaN, made quiet, sign kept);
// bf16 -> float is exact. Array conversions (SIMD, OpenMP) live in kernels/bf16_convert.h.
#pragma once
#include <bit>      // std::bit_cast
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

}  // namespace ms
