// gelu.cu: fused bias + tanh-approximate GeLU, forward (fp32 or bf16 output) and backward, in
// gelu.h's form x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)); dbias by the column sums.
#include <algorithm>  // std::min

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;
constexpr float kTwoK = 1.5957691216057308f;  // 2 sqrt(2/pi)
constexpr float kA = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  const float u = kTwoK * (x + kA * x * x * x);
  return x / (1.f + expf(-u));
}
__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kTwoK * (x + kA * x * x * x);
  const float sg = 1.f / (1.f + expf(-u));
  return sg + x * sg * (1.f - sg) * kTwoK * (1.f + 3.f * kA * x * x);
}

template <typename Out>
__global__ void bias_gelu_forward_kernel(Out* out, float* pre, const float* bias, int N, int C) {
  const size_t n = static_cast<size_t>(N) * C;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float x = pre[i];
    if (bias) {
      x += bias[i % C];
      pre[i] = x;
    }
    const float y = gelu(x);
    if constexpr (sizeof(Out) == 2) out[i] = detail::f32_to_bf16_bits(y);
    else out[i] = y;
  }
}

__global__ void bias_gelu_backward_kernel(float* dpre, const float* dout, const float* pre, size_t n) {
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dpre[i] = dout[i] * gelu_grad(pre[i]);
}

struct Plain {
  const float* x;
  int C;
  __device__ float operator()(int r, int c) const { return x[static_cast<size_t>(r) * C + c]; }
};
unsigned grid_for(size_t n) { return static_cast<unsigned>(std::min<size_t>(detail::blocks_for(n, 256), 132 * 16)); }
}  // namespace

void bias_gelu_forward(float* out, float* pre, const float* bias, int N, int C, Stream s) {
  if (N <= 0 || C <= 0) return;
  bias_gelu_forward_kernel<float><<<grid_for(static_cast<size_t>(N) * C), 256, 0, st(s)>>>(out, pre, bias, N, C);
  MS_CUDA_CHECK_LAUNCH();
}
void bias_gelu_forward_bf16(bf16_t* out, float* pre, const float* bias, int N, int C, Stream s) {
  if (N <= 0 || C <= 0) return;
  bias_gelu_forward_kernel<bf16_t><<<grid_for(static_cast<size_t>(N) * C), 256, 0, st(s)>>>(out, pre, bias, N, C);
  MS_CUDA_CHECK_LAUNCH();
}
void bias_gelu_backward(float* dpre, float* dbias, const float* dout, const float* pre, int N, int C, Stream s) {
  if (N <= 0 || C <= 0) return;
  const size_t n = static_cast<size_t>(N) * C;
  bias_gelu_backward_kernel<<<grid_for(n), 256, 0, st(s)>>>(dpre, dout, pre, n);
  MS_CUDA_CHECK_LAUNCH();
  detail::column_sums(dbias, Plain{dpre, C}, N, C, s);
}

}  // namespace ms::cuda
