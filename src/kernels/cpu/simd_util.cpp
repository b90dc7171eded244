// simd_util.cpp: the once-per-process ISA choice (see simd_util.h).
#include "kernels/cpu/simd_util.h"

#include <cstdlib>  // std::getenv
#include <string_view>

namespace ms {

bool use_avx512() {
  static const bool v = [] {
    const char* e = std::getenv("MS_KERNEL_ISA");
    if (e && std::string_view(e) == "generic") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma");
  }();
  return v;
}

}  // namespace ms
