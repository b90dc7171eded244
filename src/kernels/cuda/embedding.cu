// embedding.cu: token + position embedding forward, and a deterministic backward without atomics:
// dwpe per (position, column) sums its rows in ascending order; dwte gives each column to one
// thread, which walks all rows in ascending order and adds into the row of that row's token (a
// column is touched by one thread only: no race, the CPU model's order, the same bits).
// The dwte pass is parallel over columns only (C threads): correct and deterministic first;
// a bucketed (sorted-ids) version is the known faster form (llm.c's wte_backward_kernel).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;

__global__ void embedding_forward_kernel(float* out, const int* ids, const float* wte, const float* wpe,
                                         int N, int T, int C, int V) {
  const size_t n = static_cast<size_t>(N) * C;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(i / C), c = static_cast<int>(i % C);
    const int id = ids[row];
    const float te = (id >= 0 && id < V) ? wte[static_cast<size_t>(id) * C + c] : 0.f;
    out[i] = te + wpe[static_cast<size_t>(row % T) * C + c];
  }
}

__global__ void dwpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<size_t>(T) * C) return;
  float acc = dwpe[i];
  for (int b = 0; b < B; ++b) acc += dout[static_cast<size_t>(b) * T * C + i];
  dwpe[i] = acc;
}

__global__ void dwte_kernel(float* dwte, const float* dout, const int* ids, int N, int C, int V) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int r = 0; r < N; ++r) {
    const int id = ids[r];
    if (id < 0 || id >= V) continue;
    dwte[static_cast<size_t>(id) * C + c] += dout[static_cast<size_t>(r) * C + c];
  }
}
}  // namespace

void embedding_forward(float* out, const int* ids, const float* wte, const float* wpe, int B, int T,
                       int C, int V, Stream s) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  unsigned g = detail::blocks_for(n, 256);
  if (g > 132u * 16u) g = 132u * 16u;
  embedding_forward_kernel<<<g, 256, 0, st(s)>>>(out, ids, wte, wpe, B * T, T, C, V);
  MS_CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* ids, int B, int T,
                        int C, int V, Stream s) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  if (dwpe) {
    dwpe_kernel<<<detail::blocks_for(static_cast<size_t>(T) * C, 256), 256, 0, st(s)>>>(dwpe, dout, B, T, C);
    MS_CUDA_CHECK_LAUNCH();
  }
  if (dwte) {
    dwte_kernel<<<detail::blocks_for(C, 32), 32, 0, st(s)>>>(dwte, dout, ids, B * T, C, V);
    MS_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ms::cuda
