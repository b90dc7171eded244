// cpu_features.cpp: see cpu_features.h.
#include "base/cpu_features.h"

#include <cpuid.h>  // __get_cpuid, __get_cpuid_count

#include <cstdint>

namespace ms {

namespace {

bool xcr0_has(uint64_t bits) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const uint64_t xcr0 = (static_cast<uint64_t>(hi) << 32) | lo;
  return (xcr0 & bits) == bits;
}

}  // namespace

bool cpu_has_avx512f() {
  static const bool v = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (b & (1u << 16)) != 0 && xcr0_has(0xE6);  // AVX512F; OS saves ZMM/opmask state
  }();
  return v;
}

bool cpu_has_avx2_fma() {
  static const bool v = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 12))) return false;  // FMA3
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 5))) return false;  // AVX2
    return xcr0_has(0x6);  // OS saves XMM/YMM state
  }();
  return v;
}

bool cpu_has_avx512_bf16() {
  static const bool v = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return (a & (1u << 5)) != 0 && xcr0_has(0xE6);  // AVX512_BF16; OS saves ZMM/opmask state
  }();
  return v;
}

bool cpu_has_amx_bf16() {
  static const bool v = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool amx = (d & (1u << 22)) && (d & (1u << 24));  // AMX-BF16, AMX-TILE
    return amx && xcr0_has((1ull << 17) | (1ull << 18));   // XTILECFG, XTILEDATA
  }();
  return v;
}

}  // namespace ms
