// work_split: the deterministic work split every optimizer kernel shares. Parts and reduction
// blocks depend only on sizes, never on the thread count, so results are the same for any number
// of threads.
#pragma once
#include <algorithm>  // std::min, std::max
#include <cstddef>    // size_t

namespace ms {

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
