// bf16_convert: float <-> bf16 conversion of whole arrays (scalar type and rounding: base/bf16.h).
// Guarantees: the scalar and AVX-512F paths are exact RNE for every input, like f32_to_bf16_rne.
// The AVX-512 BF16 path (VCVTNE2PS2BF16) is the same except that the hardware treats denormal
// inputs as zero (and flushes denormal results to zero): it only differs below 1.2e-38 in
// magnitude. Conversion of large arrays is OpenMP-parallel; results never depend on the thread count.
#pragma once
#include <cstddef>  // size_t

#include "base/bf16.h"  // bf16_t

namespace ms {

// Which conversion loop f32_to_bf16 runs. kAuto: AVX-512 BF16 if the CPU has it, else AVX-512F
// (integer rounding) if use_avx512(), else scalar. Forcing a path the CPU lacks is an error.
enum class Bf16Path { kAuto, kScalar, kAvx512, kAvx512Bf16 };

// out[i] = bf16(in[i]) for i < n.
void f32_to_bf16(bf16_t* out, const float* in, size_t n, Bf16Path path = Bf16Path::kAuto);

// out[i] = float(in[i]) for i < n (exact).
void bf16_to_f32(float* out, const bf16_t* in, size_t n);

}  // namespace ms
