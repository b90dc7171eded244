// reduce.cu: the scratch slots and the column-sum reduction of common.cuh; add_column_sums.
#include <array>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace detail {

void* scratch(Slot slot, size_t bytes) {
  // Never destroyed: freeing at process exit would race the CUDA runtime's own teardown.
  static auto* slots = new std::array<DeviceBuffer<unsigned char>, static_cast<size_t>(Slot::kCount)>;
  auto& b = (*slots)[static_cast<size_t>(slot)];
  if (b.size() < bytes) {
    MS_CUDA_CHECK(cudaDeviceSynchronize());  // work still queued may read the old array
    b.resize(bytes);
  }
  return b.data();
}

__global__ void column_finish_kernel(float* out, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.f;
  for (int k = 0; k < chunks; ++k) acc += partial[static_cast<size_t>(k) * C + c];
  out[c] += acc;
}

}  // namespace detail

namespace {
struct Plain {
  const float* x;
  int C;
  __device__ float operator()(int r, int c) const { return x[static_cast<size_t>(r) * C + c]; }
};
}  // namespace

void add_column_sums(float* out, const float* x, int N, int C, Stream s) {
  detail::column_sums(out, Plain{x, C}, N, C, s);
}

}  // namespace ms::cuda
