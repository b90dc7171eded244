// hw_peak.cpp: see hw_peak.h.
#include "kernels/hw_peak.h"

#include <immintrin.h>  // zmm / ymm FMA and VDPBF16PS intrinsics (per-function targets below)
#include <omp.h>

#include <algorithm>  // std::max, std::sort
#include <cmath>      // std::exp2, std::log2, std::round, std::isfinite
#include <cstdint>
#include <ctime>      // clock_gettime
#include <vector>

#include "base/cpu_features.h"  // cpu_has_avx512f, cpu_has_avx2_fma, cpu_has_avx512_bf16
#include "kernels/gemm_bf16.h"  // bf16_gemm_uses_amx

namespace ms {

namespace {

// Clock rounds: 4 x 4M iterations of 8 dependent multiplies (3 cycles each) = ~26 ms each at 3.7 GHz.
constexpr int kClockRounds = 4;
constexpr uint64_t kClockIters = 4'000'000;
// Issue-rate rounds: 3 x 2.5M iterations of 16 independent instructions (~5-10 ms each).
constexpr int kRateRounds = 3;
constexpr int64_t kRateIters = 2'500'000;

double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs f() on every OpenMP thread at once, `rounds` times; the best round's median over threads.
// (Interference - other processes, a busy SMT sibling, a stolen vCPU - only lowers a rate.)
template <class F>
double best_median_all_threads(int rounds, F f) {
  const int nt = std::max(1, omp_get_max_threads());
  double best = 0;
  for (int r = 0; r < rounds; r++) {
    std::vector<double> v(static_cast<size_t>(nt));
#pragma omp parallel num_threads(nt)
    v[static_cast<size_t>(omp_get_thread_num())] = f();
    best = std::max(best, median(v));
  }
  return best;
}

// GHz of this thread: 8 dependent 64-bit multiplies per iteration, 3 cycles each (an add chain is no
// good: recent cores fold immediate adds in the renamer).
double mul_chain_ghz(uint64_t iters) {
  uint64_t x = 1, n = iters;
  const double t0 = thread_cpu_s();
  asm volatile(
      "1:\n\t"
      "imul %0, %0\n\t" "imul %0, %0\n\t" "imul %0, %0\n\t" "imul %0, %0\n\t"
      "imul %0, %0\n\t" "imul %0, %0\n\t" "imul %0, %0\n\t" "imul %0, %0\n\t"
      "dec %1\n\t"
      "jnz 1b\n\t"
      : "+r"(x), "+r"(n)
      :
      : "cc");
  const double s = thread_cpu_s() - t0;
  return s > 0 ? 24.0 * static_cast<double>(iters) / s / 1e9 : 0.0;
}

// 16 independent accumulator chains, each a named variable (an array would live on the stack); the
// empty asm statements keep them in registers and every instruction in the loop (the compiler can
// neither drop, merge nor reorder the work). OP(a) is the instruction applied to accumulator a.
#define MS_ISSUE_LOOP(VEC, INIT, OP)                                                                    \
  VEC a0 = INIT(0), a1 = INIT(1), a2 = INIT(2), a3 = INIT(3), a4 = INIT(4), a5 = INIT(5), a6 = INIT(6),  \
      a7 = INIT(7), a8 = INIT(8), a9 = INIT(9), a10 = INIT(10), a11 = INIT(11), a12 = INIT(12),          \
      a13 = INIT(13), a14 = INIT(14), a15 = INIT(15);                                                    \
  const double t0 = thread_cpu_s();                                                                      \
  for (int64_t i = 0; i < iters; i++) {                                                                  \
    a0 = OP(a0); a1 = OP(a1); a2 = OP(a2); a3 = OP(a3); a4 = OP(a4); a5 = OP(a5); a6 = OP(a6);           \
    a7 = OP(a7); a8 = OP(a8); a9 = OP(a9); a10 = OP(a10); a11 = OP(a11); a12 = OP(a12);                  \
    a13 = OP(a13); a14 = OP(a14); a15 = OP(a15);                                                         \
    asm volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7));   \
    asm volatile("" : "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11), "+v"(a12), "+v"(a13), "+v"(a14),         \
                 "+v"(a15));                                                                             \
  }                                                                                                      \
  const double s = thread_cpu_s() - t0;                                                                  \
  return s > 0 ? 16.0 * static_cast<double>(iters) / s : 0.0

// Instructions per second of this thread: 16 independent zmm FMA chains (a = a * 0.999 + 0.001
// converges to 1: no overflow, no denormals).
__attribute__((target("avx512f"))) double zmm_fma_per_s(int64_t iters) {
  const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
#define INIT(k) _mm512_set1_ps(0.01f * (k))
#define OP(a) _mm512_fmadd_ps(a, m, c)
  MS_ISSUE_LOOP(__m512, INIT, OP);
#undef INIT
#undef OP
}

__attribute__((target("avx2,fma"))) double ymm_fma_per_s(int64_t iters) {
  const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
#define INIT(k) _mm256_set1_ps(0.01f * (k))
#define OP(a) _mm256_fmadd_ps(a, m, c)
  MS_ISSUE_LOOP(__m256, INIT, OP);
#undef INIT
#undef OP
}

// 16 independent zmm VDPBF16PS chains: acc += 32 bf16 products of 2^-10 x 2^-10 per lane pair
// (grows to ~5 after 2.5M iterations: no overflow, no denormals).
__attribute__((target("avx512f,avx512bf16"))) double zmm_dpbf16_per_s(int64_t iters) {
  const __m512 x = _mm512_set1_ps(1.0f / 1024);
  const __m512bh b = _mm512_cvtne2ps_pbh(x, x);
#define INIT(k) _mm512_set1_ps(0.0f * (k))
#define OP(a) _mm512_dpbf16_ps(a, b, b)
  MS_ISSUE_LOOP(__m512, INIT, OP);
#undef INIT
#undef OP
}

#undef MS_ISSUE_LOOP

// An issue-rate measurement: instructions per cycle as measured, and the FLOP/cycle it gives.
struct Issue {
  double ipc = 0;            // instructions per cycle, before rounding (0: not measured)
  double flop_per_cycle = 0; // ipc rounded to the nearest power of two (in log scale) x flop/instr
};

Issue issue(double instr_per_s, double flop_per_instr) {
  Issue r;
  const double hz = measure_core_clock_ghz() * 1e9;
  if (!(instr_per_s > 0) || !(hz > 0)) return r;
  r.ipc = instr_per_s / hz;
  const double pow2 = std::exp2(std::round(std::log2(r.ipc)));
  r.flop_per_cycle = std::isfinite(pow2) ? pow2 * flop_per_instr : 0.0;
  return r;
}

const Issue& fp32_issue() {
  static const Issue v = [] {
    if (cpu_has_avx512f())
      return issue(best_median_all_threads(kRateRounds, [] { return zmm_fma_per_s(kRateIters); }), 32);
    if (cpu_has_avx2_fma())
      return issue(best_median_all_threads(kRateRounds, [] { return ymm_fma_per_s(kRateIters); }), 16);
    return Issue{};
  }();
  return v;
}

const Issue& bf16_issue() {
  static const Issue v = [] {
    if (!cpu_has_avx512_bf16()) return Issue{};
    return issue(best_median_all_threads(kRateRounds, [] { return zmm_dpbf16_per_s(kRateIters); }), 64);
  }();
  return v;
}

}  // namespace

double measure_core_clock_ghz() {
  static const double ghz = best_median_all_threads(kClockRounds, [] { return mul_chain_ghz(kClockIters); });
  return ghz;
}

double measure_fp32_flop_per_cycle() { return fp32_issue().flop_per_cycle; }

double measure_avx512_bf16_flop_per_cycle() { return bf16_issue().flop_per_cycle; }

HardwarePeak hardware_peak(int cores) {
  HardwarePeak p;
  p.clock_ghz = measure_core_clock_ghz();
  p.cores = cores;
  p.fp32_flop_per_cycle = measure_fp32_flop_per_cycle();
  p.fp32_issue_per_cycle = fp32_issue().ipc;
  p.fp32_unit = cpu_has_avx512f() ? "AVX-512 FMA" : cpu_has_avx2_fma() ? "AVX2 FMA" : "no FMA (unknown)";
  if (bf16_gemm_uses_amx()) {
    p.bf16_unit = "AMX-BF16";
    p.bf16_flop_per_cycle = kAmxBf16FlopPerCycle;
  } else if (cpu_has_avx512_bf16()) {
    p.bf16_unit = "AVX512-BF16";
    p.bf16_flop_per_cycle = measure_avx512_bf16_flop_per_cycle();
    p.bf16_issue_per_cycle = bf16_issue().ipc;
    p.bf16_measured = true;
  } else {
    p.bf16_unit = "fp32 FMA (no bf16 unit)";
    p.bf16_flop_per_cycle = p.fp32_flop_per_cycle;
    p.bf16_issue_per_cycle = p.fp32_issue_per_cycle;
    p.bf16_measured = true;
  }
  return p;
}

}  // namespace ms
