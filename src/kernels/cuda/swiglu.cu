// swiglu.cu: the SwiGLU activation (kernels/swiglu.h) on the GPU, elementwise over (row, column):
// pre (N, 2F) rows are [gate (F) | up (F)]; out = silu(gate) * up (fp32, or bf16 rounded to nearest
// even), dpre = [dout * up * silu'(gate) | dout * silu(gate)] (overwritten). The CPU's expressions in
// its order (--fmad=false: no contraction); sigmoid(x) = 1 / (1 + exp(min(-x, 80))) as the CPU caps
// it, with expf (<= 2 ulp) where the CPU has its vector exp (<= 1.4 ulp): results agree to a few ulp.
// Guarantees: every element computed on its own (the same bits on every run); no allocation.
#include <algorithm>  // std::min

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;

// A NaN gate still gives NaN results: it enters every product below beside its sigmoid.
__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(fminf(-x, 80.f))); }

template <typename Out>
__global__ void swiglu_forward_kernel(Out* out, const float* pre, int F, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / F, c = i % F;
    const float* g = pre + row * 2 * F;
    const float y = g[c] * sigmoid(g[c]) * g[F + c];
    if constexpr (sizeof(Out) == 2) out[i] = detail::f32_to_bf16_bits(y);
    else out[i] = y;
  }
}

// d silu(g) / dg = s (1 + g (1 - s)) with s = sigmoid(g).
__global__ void swiglu_backward_kernel(float* dpre, const float* dout, const float* pre, int F, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / F, c = i % F;
    const float g = pre[row * 2 * F + c], u = pre[row * 2 * F + F + c], d = dout[i];
    const float s = sigmoid(g);
    dpre[row * 2 * F + c] = d * u * (s * (1.f + g * (1.f - s)));
    dpre[row * 2 * F + F + c] = d * (g * s);
  }
}

unsigned grid_for(size_t n) { return static_cast<unsigned>(std::min<size_t>(detail::blocks_for(n, 256), 132 * 16)); }

// The element count N*F, after the shape check (as the CPU's MS_CHECK: N >= 0, F > 0).
size_t elements(const char* what, int N, int F) {
  if (N < 0 || F <= 0) device_call_failed(__FILE__, __LINE__, what, 0, "N >= 0 and F > 0 required");
  return static_cast<size_t>(N) * F;
}
}  // namespace

void swiglu_forward(float* out, const float* pre, int N, int F, Stream s) {
  const size_t n = elements("cuda::swiglu_forward", N, F);
  if (n == 0) return;
  swiglu_forward_kernel<float><<<grid_for(n), 256, 0, st(s)>>>(out, pre, F, n);
  MS_CUDA_CHECK_LAUNCH();
}
void swiglu_forward_bf16(bf16_t* out, const float* pre, int N, int F, Stream s) {
  const size_t n = elements("cuda::swiglu_forward_bf16", N, F);
  if (n == 0) return;
  swiglu_forward_kernel<bf16_t><<<grid_for(n), 256, 0, st(s)>>>(out, pre, F, n);
  MS_CUDA_CHECK_LAUNCH();
}
void swiglu_backward(float* dpre, const float* dout, const float* pre, int N, int F, Stream s) {
  const size_t n = elements("cuda::swiglu_backward", N, F);
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n), 256, 0, st(s)>>>(dpre, dout, pre, F, n);
  MS_CUDA_CHECK_LAUNCH();
}

}  // namespace ms::cuda
