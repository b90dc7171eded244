// rope.cu: rotary position embedding (kernels/rope.h) on the GPU, in place on rows [lo, hi) of the
// packed qkv buffer (rows of (NH + 2*NKV)*HS floats): the NH query heads and the NKV key heads that
// follow them are rotated, the value heads are not touched. Hugging Face's rotate_half: channel
// i < H = HS/2 pairs with i + H, x'[i] = x[i] cos - x[i+H] sin, x'[i+H] = x[i+H] cos + x[i] sin, with
// the (T, H) cos/sin tables of rope_table in device memory and row r at position r % T; backward
// applies the inverse rotation (sin negated).
// Guarantees: one thread per channel pair, the CPU's arithmetic operation for operation (no fma
// contraction: --fmad=false), so the CPU's bits; no allocation.
#include <algorithm>  // std::min

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;

// n = (hi - lo) * heads * H pairs; pair k: row lo + k / (heads * H), head (k / H) % heads, channel k % H.
__global__ void rope_kernel(float* qkv, const float* cos, const float* sin, int lo, int T, int heads, int H,
                            size_t width, size_t n, float sign) {
  const size_t per_row = static_cast<size_t>(heads) * H;
  for (size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t r = lo + k / per_row, rem = k % per_row, h = rem / H, i = rem % H;
    const size_t t = (r % T) * H + i;
    float* a = qkv + r * width + h * 2 * H + i;
    const float x = a[0], y = a[H], c = cos[t], si = sign * sin[t];
    a[0] = x * c - y * si;
    a[H] = y * c + x * si;
  }
}

void rotate(float* qkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV, int HS,
            float sign, Stream s, const char* what) {
  if (lo < 0 || lo > hi || T <= 0 || NH <= 0 || NKV <= 0 || HS <= 0 || HS % 2 != 0)
    device_call_failed(__FILE__, __LINE__, what, 0,
                       "rows 0 <= lo <= hi, T > 0, NH > 0, NKV > 0 and an even head size HS > 0 required");
  const int H = HS / 2, heads = NH + NKV;
  const size_t n = static_cast<size_t>(hi - lo) * heads * H;
  if (n == 0) return;
  const size_t width = static_cast<size_t>(NH + 2 * NKV) * HS;
  const unsigned grid = static_cast<unsigned>(std::min<size_t>(detail::blocks_for(n, 256), 132 * 16));
  rope_kernel<<<grid, 256, 0, st(s)>>>(qkv, cos, sin, lo, T, heads, H, width, n, sign);
  MS_CUDA_CHECK_LAUNCH();
}
}  // namespace

void rope_forward(float* qkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV, int HS,
                  Stream s) {
  rotate(qkv, cos, sin, lo, hi, T, NH, NKV, HS, 1.f, s, "cuda::rope_forward");
}
void rope_backward(float* dqkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV, int HS,
                   Stream s) {
  rotate(dqkv, cos, sin, lo, hi, T, NH, NKV, HS, -1.f, s, "cuda::rope_backward");
}

}  // namespace ms::cuda
