// grad_norm: global gradient L2 norm, clipping and finiteness check over flat fp32 buffers.
// Sums of squares accumulate in double over fixed blocks (work_split.h: the block layout depends
// only on n) with 8 fixed lanes per block, so the result is bit-identical for any OpenMP thread
// count and for the SIMD and scalar builds. grad_sq_sum of a slice is a partial sum: a sharded
// caller adds the partials of all shards (then the association differs from the unsharded sum).
#pragma once
#include <cstddef>  // size_t

#include "base/device.h"  // Device

namespace ms {

// Sum of squares of g[0..n), in double.
double grad_sq_sum(const float* g, size_t n);
// The same of g in the memory of device d (kCuda: the GPU's fixed-order reduction in double,
// kernels/optim_kernels.h; not bit-identical to the CPU sum).
double grad_sq_sum(const float* g, size_t n, Device d);
// sqrt(grad_sq_sum(g, n)).
double grad_l2_norm(const float* g, size_t n);

// The factor torch.nn.utils.clip_grad_norm_ multiplies the gradients by:
// min(1, max_norm / (total_norm + 1e-6)). max_norm <= 0 disables clipping (returns 1).
// A NaN norm gives NaN and an infinite norm gives 0, as in torch (check all_finite first).
float clip_scale(double total_norm, float max_norm);

// g[i] *= s for i < n (a no-op when s == 1).
void scale_inplace(float* g, size_t n, float s);

// True when no element of x[0..n) is NaN or +-inf.
bool all_finite(const float* x, size_t n);

namespace optim_detail {
// acc[k % 8] += double(x[k])^2 for k < n: the lane layout shared by every deterministic sum of
// squares. Callers continuing a block across calls must pass chunks whose lengths are multiples
// of 8 (except the last) so that lanes stay aligned with the block start.
void sq_accum8(const float* x, size_t n, double acc[8]);
// The lanes added in a fixed order.
double lanes_total(const double acc[8]);
}  // namespace optim_detail

}  // namespace ms
