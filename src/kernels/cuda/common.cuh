// common.cuh (private to kernels/cuda/): what the .cu files share. Launch geometry, the
// deterministic warp/block reductions (a fixed shuffle tree: the same bits on every run, no
// atomics), the column-sum reduction (fixed row chunks, summed in order) and the device scratch
// grown once per slot and kept (so no device allocation after warm-up).
// Not thread-safe: one host thread drives the kernels (as the model does).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "base/cuda_check.h"  // MS_CUDA_CHECK, MS_CUDA_CHECK_LAUNCH
#include "base/device.h"      // Stream, DeviceBuffer

namespace ms::cuda::detail {

inline cudaStream_t st(Stream s) { return static_cast<cudaStream_t>(s.handle); }
inline unsigned blocks_for(size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// Scratch slots, each a device array grown on demand and never shrunk.
// kSumPartials: the per-block double partials of the sums of squares (optim.cu).
enum class Slot { kColumnPartials, kColumnPartials2, kGemmWorkspace, kSumPartials, kCount };
void* scratch(Slot slot, size_t bytes);

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `shared` holds 32 floats. Fixed order: deterministic.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nw ? shared[lane] : 0.f;
  return warp_sum(v);
}
// The same in double (`shared` holds 32 doubles).
__device__ __forceinline__ double block_sum(double v, double* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nw ? shared[lane] : 0.0;
  return warp_sum(v);
}

// out[c] += sum over rows r of f(r, c), r in [0, N), in fixed 32-row chunks summed in order.
// f is a __device__ functor (value of row r, column c).
constexpr int kChunkRows = 32;
template <typename F>
__global__ void column_partials_kernel(float* partial, F f, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int chunk = blockIdx.y;
  if (c >= C) return;
  const int r0 = chunk * kChunkRows, r1 = min(N, r0 + kChunkRows);
  float acc = 0.f;
  for (int r = r0; r < r1; ++r) acc += f(r, c);
  partial[static_cast<size_t>(chunk) * C + c] = acc;
}
__global__ void column_finish_kernel(float* out, const float* partial, int chunks, int C);

template <typename F>
void column_sums(float* out, F f, int N, int C, Stream s, Slot slot = Slot::kColumnPartials) {
  if (N <= 0 || C <= 0 || out == nullptr) return;
  const int chunks = (N + kChunkRows - 1) / kChunkRows;
  float* partial = static_cast<float*>(scratch(slot, sizeof(float) * static_cast<size_t>(chunks) * C));
  const dim3 grid(blocks_for(C, 128), chunks);
  column_partials_kernel<<<grid, 128, 0, st(s)>>>(partial, f, N, C);
  MS_CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<blocks_for(C, 128), 128, 0, st(s)>>>(out, partial, chunks, C);
  MS_CUDA_CHECK_LAUNCH();
}

// Exact round-to-nearest-even float -> bf16 bits, as base/bf16.h's f32_to_bf16_rne.
__device__ __forceinline__ uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
__device__ __forceinline__ float bf16_bits_to_f32(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}

}  // namespace ms::cuda::detail
