// hw_peak: the HARDWARE peak of this machine, the MFU denominator as MegaScale counts it:
// cores x FLOP/cycle/core x clock, for the precision in use. Measured, not looked up:
//  - the clock: a chain of dependent 64-bit multiplies (3 cycles each on every x86 core of the last
//    decade) on every OpenMP thread at once, timed in thread CPU time so that other processes on the
//    cores do not skew it; the median over the threads, the best of a few ~25 ms rounds (~0.13 s);
//  - FLOP/cycle per core: the issue rate of a loop of 16 independent accumulators (enough to hide any
//    x86 FMA latency) of zmm FMAs (fp32, 32 flop per instruction; AVX2 CPUs: ymm FMAs, 16 flop) and
//    of zmm VDPBF16PS (AVX512-BF16, 64 flop per instruction), on every thread at once, divided by the
//    measured clock and rounded to the nearest power of two (the rounding absorbs the noise of a
//    shared machine and any clock drop under vector load), times the flop per instruction;
//  - AMX-BF16 cannot be measured this way (tile instructions, no simple issue loop): it is taken from
//    the specification, 1024 flop/cycle/core (TDPBF16PS: a 16x32 by 32x16 bf16 tile product, 16x16x32
//    multiply-adds, issued every 16 cycles).
// "Precision in use" for bf16: AMX-BF16 when oneDNN runs bf16 GEMMs on AMX (gemm_bf16.h
// bf16_gemm_uses_amx), else AVX512-BF16 when the CPU has it, else fp32 FMAs (bf16 widened to fp32).
// Threads that share a physical core (SMT) share its units: measured together, each thread sees its
// share, so cores x FLOP/cycle stays the peak of the threads used.
// Guarantees: each quantity is measured once per process (thread-safe; the first call pays ~0.15 s);
// a CPU without FMA reports 0 FLOP/cycle (unknown) rather than a guess; an instruction is only
// executed when base/cpu_features.h says the CPU (and OS) has it.
#pragma once
#include <string>

#include "base/dtype.h"  // DType

namespace ms {

// The all-core clock under load, GHz (cached per process; measured on omp_get_max_threads() threads).
double measure_core_clock_ghz();

// Measured FLOP/cycle per core of the fp32 FMA unit (zmm if AVX-512, else ymm; 0 without FMA) and of
// AVX512-BF16 (0 without it). Cached per process.
double measure_fp32_flop_per_cycle();
double measure_avx512_bf16_flop_per_cycle();

// AMX-BF16, from the specification (see above).
inline constexpr double kAmxBf16FlopPerCycle = 1024;

struct HardwarePeak {
  double clock_ghz = 0;
  int cores = 0;                     // the threads the rank computes with
  double fp32_flop_per_cycle = 0;    // per core; 0: unknown (no FMA)
  double bf16_flop_per_cycle = 0;    // per core, of bf16_unit; 0: unknown
  std::string fp32_unit;             // "AVX-512 FMA" | "AVX2 FMA" | "no FMA (unknown)"
  std::string bf16_unit;             // "AMX-BF16" | "AVX512-BF16" | "fp32 FMA (no bf16 unit)"
  bool bf16_measured = false;        // false: bf16_flop_per_cycle is the AMX specification value
  // The measured instructions per cycle before rounding (0: not measured), for reports.
  double fp32_issue_per_cycle = 0, bf16_issue_per_cycle = 0;

  double flop_per_cycle(DType precision) const {
    return precision == DType::kBF16 ? bf16_flop_per_cycle : fp32_flop_per_cycle;
  }
  // cores x FLOP/cycle x clock; 0 when unknown.
  double gflops(DType precision) const { return cores * flop_per_cycle(precision) * clock_ghz; }
};

// The peak of `cores` cores of this machine (measurements cached; the first call measures).
HardwarePeak hardware_peak(int cores);

// The GPU's peak (device 0), from the card: SMs x SM clock (cudaDevAttrClockRate) x FLOP per SM per
// clock of its dense units. Hopper (sm_90): 4096 bf16 FLOP (tensor cores, dense) and 256 fp32 FLOP
// (128 FP32 lanes x FMA) per SM per clock; other generations are not tabled (0 = unknown). All
// zeros when no GPU opens.
struct GpuPeak {
  int sm_count = 0;
  double clock_ghz = 0;
  double bf16_flop_per_sm_clock = 0, fp32_flop_per_sm_clock = 0;
  double gflops(DType precision) const {
    return sm_count * clock_ghz * (precision == DType::kBF16 ? bf16_flop_per_sm_clock : fp32_flop_per_sm_clock);
  }
};
GpuPeak gpu_peak();

}  // namespace ms
