// test_hw_peak: the measured hardware peak (kernels/hw_peak.h) is physically sane - a clock a real
// core runs at, FLOP/cycle a power of two of a real FMA unit, the bf16 unit no slower than fp32 where
// the CPU has one, gflops() = cores x FLOP/cycle x clock. No timing thresholds beyond that.
#include <gtest/gtest.h>

#include <cmath>

#include "base/cpu_features.h"   // cpu_has_avx512f, cpu_has_avx2_fma, cpu_has_avx512_bf16
#include "kernels/gemm_bf16.h"   // bf16_gemm_uses_amx
#include "kernels/hw_peak.h"

using namespace ms;

namespace {

bool power_of_two_unit(double f) {
  for (double p : {8.0, 16.0, 32.0, 64.0, 128.0})
    if (f == p) return true;
  return false;
}

TEST(HwPeak, ClockIsOneACoreRunsAtAndCached) {
  const double ghz = measure_core_clock_ghz();
  EXPECT_GT(ghz, 0.5);
  EXPECT_LT(ghz, 7.0);
  EXPECT_EQ(measure_core_clock_ghz(), ghz);  // measured once per process
}

TEST(HwPeak, Fp32FlopPerCycleIsAPowerOfTwoOfARealFmaUnit) {
  const double f = measure_fp32_flop_per_cycle();
  if (!cpu_has_avx2_fma() && !cpu_has_avx512f()) {
    EXPECT_EQ(f, 0.0) << "no FMA: unknown, reported as 0";
    return;
  }
  EXPECT_TRUE(power_of_two_unit(f)) << f;
  if (cpu_has_avx512f()) {
    EXPECT_GE(f, 16.0) << "a zmm FMA is 32 flop; even half-rate units issue one per 2 cycles";
  }
}

TEST(HwPeak, Bf16UnitAndFlopPerCycle) {
  const HardwarePeak p = hardware_peak(2);
  ASSERT_GT(p.fp32_flop_per_cycle, 0.0) << "this test machine has FMA";
  if (bf16_gemm_uses_amx()) {
    EXPECT_EQ(p.bf16_unit, "AMX-BF16");
    EXPECT_EQ(p.bf16_flop_per_cycle, 1024.0);
    EXPECT_FALSE(p.bf16_measured);
  } else if (cpu_has_avx512_bf16()) {
    EXPECT_EQ(p.bf16_unit, "AVX512-BF16");
    EXPECT_TRUE(p.bf16_measured);
    const double b = measure_avx512_bf16_flop_per_cycle();
    EXPECT_EQ(p.bf16_flop_per_cycle, b);
    EXPECT_TRUE(power_of_two_unit(b)) << b;
    EXPECT_GE(b, p.fp32_flop_per_cycle) << "VDPBF16PS does twice the flop of an FMA per instruction";
  } else {
    EXPECT_EQ(p.bf16_unit, "fp32 FMA (no bf16 unit)");
    EXPECT_EQ(p.bf16_flop_per_cycle, p.fp32_flop_per_cycle);
  }
  if (cpu_has_avx512_bf16()) {
    EXPECT_GE(p.bf16_flop_per_cycle, p.fp32_flop_per_cycle);
  }
}

TEST(HwPeak, GflopsIsCoresTimesFlopPerCycleTimesClock) {
  for (int cores : {1, 2, 8}) {
    const HardwarePeak p = hardware_peak(cores);
    EXPECT_EQ(p.cores, cores);
    EXPECT_DOUBLE_EQ(p.clock_ghz, measure_core_clock_ghz());
    EXPECT_DOUBLE_EQ(p.gflops(DType::kF32), cores * p.fp32_flop_per_cycle * p.clock_ghz);
    EXPECT_DOUBLE_EQ(p.gflops(DType::kBF16), cores * p.bf16_flop_per_cycle * p.clock_ghz);
    EXPECT_EQ(p.flop_per_cycle(DType::kF32), p.fp32_flop_per_cycle);
  }
}

}  // namespace
