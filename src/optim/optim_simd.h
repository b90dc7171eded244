// optim_simd: the switch between the optimizer kernels' AVX2+FMA paths and their scalar twins.
// Both give bit-identical results: every operation is a single IEEE-rounded add, mul, div, sqrt or
// fma, evaluated in the same order on both paths (tests compare them).
#pragma once
#include <atomic>  // std::atomic

namespace ms {

// The optimizer kernels use AVX2+FMA when the CPU has it, unless disabled here (tests compare the
// two paths; results are identical either way). Process-wide; set it before training, not during.
inline std::atomic<bool> g_optim_simd_allowed{true};
inline void optim_set_simd(bool allowed) { g_optim_simd_allowed.store(allowed, std::memory_order_relaxed); }
inline bool optim_simd_active() {
  static const bool has = [] {
    __builtin_cpu_init();  // safe to call repeatedly; needed if we run before libgcc's constructor
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has && g_optim_simd_allowed.load(std::memory_order_relaxed);
}

}  // namespace ms
