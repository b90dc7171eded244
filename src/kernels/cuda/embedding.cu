// embedding.cu: token + position embedding forward (whole, or as backend.h's row-range lookup of a
// vocabulary part and the position add), and a deterministic backward without atomics: dwpe per
// (position, column) sums its rows in ascending order; dwte gives each column to one thread, which
// walks all rows in ascending order and adds into the row of that row's token (a column is touched
// by one thread only: no race, the CPU model's order, the same bits).
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

// dwpe[p] += d[i] over rows i < n with (row0 + i) % T == p, ascending: one thread per (p, c).
__global__ void dwpe_kernel(float* dwpe, const float* d, int n, int C, int T, int row0) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<size_t>(T) * C) return;
  const int p = static_cast<int>(e / C), c = static_cast<int>(e % C);
  float acc = dwpe[e];
  for (int i = ((p - row0) % T + T) % T; i < n; i += T) acc += d[static_cast<size_t>(i) * C + c];
  dwpe[e] = acc;
}

// dwte[ids[r] - v0] += d[r] for v0 <= ids[r] < v1: one thread per column walks every row in order.
__global__ void dwte_kernel(float* dwte, const float* d, const int* ids, int N, int C, int v0, int v1) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int r = 0; r < N; ++r) {
    const int id = ids[r];
    if (id < v0 || id >= v1) continue;
    dwte[static_cast<size_t>(id - v0) * C + c] += d[static_cast<size_t>(r) * C + c];
  }
}

__global__ void lookup_kernel(float* out, const int* ids, const float* wte, int lo, int hi, int C, int v0, int v1) {
  const size_t n = static_cast<size_t>(hi - lo) * C, base = static_cast<size_t>(lo) * C;
  for (size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
       k += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = base + k;
    const int row = static_cast<int>(i / C), c = static_cast<int>(i % C);
    const int id = ids[row];
    out[i] = (id >= v0 && id < v1) ? wte[static_cast<size_t>(id - v0) * C + c] : 0.f;
  }
}

__global__ void add_position_kernel(float* out, const float* wpe, int n, int C, int T, int row0) {
  const size_t total = static_cast<size_t>(n) * C;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int row = static_cast<int>(i / C), c = static_cast<int>(i % C);
    out[i] += wpe[static_cast<size_t>((row0 + row) % T) * C + c];
  }
}

unsigned grid_for(size_t n) {
  const unsigned g = detail::blocks_for(n, 256);
  return g < 132u * 16u ? g : 132u * 16u;
}

void launch_dwpe(float* dwpe, const float* d, int n, int C, int T, int row0, Stream s) {
  dwpe_kernel<<<detail::blocks_for(static_cast<size_t>(T) * C, 256), 256, 0, st(s)>>>(dwpe, d, n, C, T, row0);
  MS_CUDA_CHECK_LAUNCH();
}
void launch_dwte(float* dwte, const float* d, const int* ids, int N, int C, int v0, int v1, Stream s) {
  dwte_kernel<<<detail::blocks_for(C, 32), 32, 0, st(s)>>>(dwte, d, ids, N, C, v0, v1);
  MS_CUDA_CHECK_LAUNCH();
}
}  // namespace

void embedding_forward(float* out, const int* ids, const float* wte, const float* wpe, int B, int T,
                       int C, int V, Stream s) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  embedding_forward_kernel<<<grid_for(n), 256, 0, st(s)>>>(out, ids, wte, wpe, B * T, T, C, V);
  MS_CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int* ids, int B, int T,
                        int C, int V, Stream s) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  if (dwpe) launch_dwpe(dwpe, dout, B * T, C, T, 0, s);
  if (dwte) launch_dwte(dwte, dout, ids, B * T, C, 0, V, s);
}

void embedding_lookup(float* out, const int* ids, const float* wte, int lo, int hi, int C, int v0, int v1,
                      Stream s) {
  if (hi <= lo || C <= 0) return;
  lookup_kernel<<<grid_for(static_cast<size_t>(hi - lo) * C), 256, 0, st(s)>>>(out, ids, wte, lo, hi, C, v0, v1);
  MS_CUDA_CHECK_LAUNCH();
}

void add_position_embedding(float* out, const float* wpe, int n, int C, int T, int row0, Stream s) {
  if (n <= 0 || C <= 0 || T <= 0) return;
  add_position_kernel<<<grid_for(static_cast<size_t>(n) * C), 256, 0, st(s)>>>(out, wpe, n, C, T, row0);
  MS_CUDA_CHECK_LAUNCH();
}

void embedding_backward_rows(float* dwte, float* dwpe, const float* d_full, const float* d_local, const int* ids,
                             int N, int n, int C, int T, int row0, int v0, int v1, Stream s) {
  if (C <= 0) return;
  if (dwpe && n > 0 && T > 0) launch_dwpe(dwpe, d_local, n, C, T, row0, s);
  if (dwte && N > 0) launch_dwte(dwte, d_full, ids, N, C, v0, v1, s);
}

}  // namespace ms::cuda
