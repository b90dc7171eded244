// optim_tensors: how the optimizers see the model. Parameters, gradients and optimizer state are
// flat fp32 buffers with one layout; a list of named ParamTensor views (offset, numel) splits them
// into tensors, and each tensor says whether weight decay applies to it. The tensors must be
// disjoint. Also holds the few helpers every optimizer kernel shares: the deterministic work split
// (which depends only on sizes, never on the thread count) and the switch between the AVX2+FMA
// kernels and their scalar twins (both give bit-identical results: every operation is a single
// IEEE-rounded add, mul, div, sqrt or fma, evaluated in the same order on both paths).
#pragma once
#include <algorithm>  // std::min, std::max
#include <atomic>     // std::atomic
#include <cstddef>    // size_t
#include <string>
#include <vector>

namespace ms {

// One tensor inside the flat parameter buffer: elements [offset, offset + numel).
struct ParamTensor {
  std::string name;
  size_t offset = 0;
  size_t numel = 0;
  bool decay = true;  // weight decay applies (the model turns it off for biases, LayerNorm, embeddings)
};

// Adam moments and decoupled weight decay; shared by AdamW and LAMB.
struct AdamHyper {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied only to tensors with decay == true
};

// The optimizer kernels use AVX2+FMA when the CPU has it, unless disabled here (tests compare the
// two paths; results are identical either way). Process-wide; set it before training, not during.
inline std::atomic<bool> g_optim_simd_allowed{true};
inline void optim_set_simd(bool allowed) { g_optim_simd_allowed.store(allowed, std::memory_order_relaxed); }
inline bool optim_simd_active() {
  static const bool has = [] {
    __builtin_cpu_init();  // safe to call repeatedly; needed if we run before libgcc's constructor
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has && g_optim_simd_allowed.load(std::memory_order_relaxed);
}

namespace optim_detail {

// Start of part i when n elements are split into k contiguous parts, in units of 16 floats
// (64 bytes) so that neighbouring parts never share a cache line; split_point(n, k, k) == n.
inline size_t split_point(size_t n, size_t k, size_t i) {
  const size_t units = (n + 15) / 16;
  const size_t u = units / k * i + std::min(i, units % k);
  return std::min(n, u * 16);
}

// Reductions (sums of squares) go over fixed blocks: their number and bounds depend only on n, and
// block partials are added in block order, so the result is the same for any thread count.
// At most kMaxBlocks blocks per buffer or tensor, each at least kMinBlock elements (except a lone block).
inline constexpr size_t kMaxBlocks = 256;
inline constexpr size_t kMinBlock = 16384;
inline size_t num_blocks(size_t n) {
  return std::max<size_t>(1, std::min(kMaxBlocks, (n + kMinBlock - 1) / kMinBlock));
}
// Block b covers [block_begin(n, nb, b), block_begin(n, nb, b + 1)); bounds are multiples of 16.
inline size_t block_begin(size_t n, size_t nb, size_t b) { return split_point(n, nb, b); }

}  // namespace optim_detail
}  // namespace ms
