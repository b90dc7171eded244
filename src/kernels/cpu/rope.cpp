// rope.cpp: see rope.h. One pass over the rows asked for, each (row, head) rotated with the row
// position's cos/sin row; the table is rope_table's.
#include "kernels/rope.h"

#include <cmath>    // std::cos, std::sin, std::pow
#include <cstddef>  // size_t

#include "base/check.h"          // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope (charged to attention: RoPE is its input's rotation)

namespace ms {
namespace {

// sign = +1: the rotation; -1: its transpose (the inverse).
void rotate_rows(float* qkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV, int HS,
                 float sign) {
  MS_CHECK(lo >= 0 && lo <= hi && T > 0 && NH > 0 && NKV > 0 && HS > 0 && HS % 2 == 0,
           "rope: bad rows [{}, {}) or shape T={} NH={} NKV={} HS={} (HS must be even)", lo, hi, T, NH, NKV, HS);
  const int H = HS / 2, heads = NH + NKV;  // the query heads, then the key heads, are contiguous
  const size_t width = static_cast<size_t>(NH + 2 * NKV) * HS;
#pragma omp parallel for schedule(static)
  for (int r = lo; r < hi; ++r) {
    const float* c = cos + static_cast<size_t>(r % T) * H;
    const float* s = sin + static_cast<size_t>(r % T) * H;
    float* row = qkv + static_cast<size_t>(r) * width;
    for (int h = 0; h < heads; ++h) {
      float* a = row + static_cast<size_t>(h) * HS;
      float* b = a + H;
#pragma omp simd
      for (int i = 0; i < H; ++i) {
        const float x = a[i], y = b[i], si = sign * s[i];
        a[i] = x * c[i] - y * si;
        b[i] = y * c[i] + x * si;
      }
    }
  }
}

}  // namespace

void rope_table(float* cos, float* sin, int T, int HS, double theta) {
  MS_CHECK(T > 0 && HS > 0 && HS % 2 == 0 && theta > 1.0, "rope_table: bad T={} HS={} (even) or theta={} (> 1)", T,
           HS, theta);
  const int H = HS / 2;
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < H; ++i) {
      const double angle = t * std::pow(theta, -2.0 * i / HS);
      cos[static_cast<size_t>(t) * H + i] = static_cast<float>(std::cos(angle));
      sin[static_cast<size_t>(t) * H + i] = static_cast<float>(std::sin(angle));
    }
}

void rope_forward(float* qkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV, int HS) {
  KernelTimeScope timed(KernelId::kAttentionForward);
  rotate_rows(qkv, cos, sin, lo, hi, T, NH, NKV, HS, 1.0f);
}

void rope_backward(float* dqkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV, int HS) {
  KernelTimeScope timed(KernelId::kAttentionBackward);
  rotate_rows(dqkv, cos, sin, lo, hi, T, NH, NKV, HS, -1.0f);
}

}  // namespace ms
