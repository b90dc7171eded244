// cpu_features: what this CPU (and the OS) offers, probed once per process with CPUID/XGETBV.
// The kernels choose their code paths from these answers; nothing here changes behaviour.
#pragma once

namespace ms {

// AVX-512 Foundation (zmm FMAs), with the OS saving the ZMM/opmask state.
bool cpu_has_avx512f();
// AVX2 and FMA3 (ymm FMAs), with the OS saving the YMM state.
bool cpu_has_avx2_fma();
// AVX512_BF16 instructions, with the OS saving the ZMM/opmask state.
bool cpu_has_avx512_bf16();
// AMX-BF16 and AMX-TILE, with the OS enabling the tile state (XTILECFG, XTILEDATA in XCR0).
bool cpu_has_amx_bf16();

}  // namespace ms
