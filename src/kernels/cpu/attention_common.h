// attention_common: what the fp32 and the bf16 flash-attention kernels share (private to cpu/):
// the tile size, the causal / sliding-window band of a query row inside a key tile, the shape
// check.
#pragma once
#include <algorithm>  // std::min, std::max

#include "base/check.h"             // MS_CHECK
#include "kernels/cpu/simd_util.h"  // MS_AI

namespace ms::attention_detail {

constexpr int kTile = 64;  // query and key tile size (rows)

// Columns [lo, hi] (inclusive, relative to key tile start j0) that query row ti may attend.
MS_AI void band(int ti, int j0, int nk, int window, int& lo, int& hi) {
  lo = std::max(0, (window > 0 ? ti - window + 1 : 0) - j0);
  hi = std::min(nk - 1, ti - j0);
}

inline void check_shapes(int B, int T, int C, int NH, int window) {
  MS_CHECK(B > 0 && T > 0 && C > 0 && NH > 0, "attention: bad shape B={} T={} C={} NH={}", B, T, C, NH);
  MS_CHECK(C % NH == 0, "attention: C={} not divisible by NH={}", C, NH);
  MS_CHECK(window >= 0, "attention: window must be >= 0 (0 = full causal), got {}", window);
}

}  // namespace ms::attention_detail
