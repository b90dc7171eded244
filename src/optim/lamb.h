// lamb: LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning", Algorithm 2), the
// optimizer MegaScale uses to scale the batch 4x (megascale.md §1.3). Per tensor:
//   m, v as in adamw.h (same fma order);  r = (m/bc1) / (sqrt(v)/sqrt(bc2) + eps) + wd*p
//   (bc1 = 1-b1^t, bc2 = 1-b2^t, or 1 when bias_correction is off; wd only where tensor.decay)
//   trust = ||p|| / ||r|| (phi = identity); trust = 1 if ||p|| == 0 or ||r|| == 0;
//   clamped to [0, max_trust] when max_trust > 0;   p -= (lr * trust) * r.
// The norms need the whole tensor, so the update is split in two phases: a ZeRO rank that owns a
// slice of each tensor runs phase 1 on its slices, all-reduces the per-tensor partial sums of
// squares (one double per tensor for ||p||^2, one for ||r||^2), then runs phase 2.
// Sums of squares are double, over fixed blocks (deterministic for any thread count, see
// grad_norm.h). m, v and r are bit-identical between sharded and unsharded runs; the norms differ
// only in the association of the double sums, so p is bit-identical unless that ~1e-16 relative
// difference moves the float-rounded trust ratio across a rounding boundary.
// OpenMP-parallel with one fork/join per phase and no barrier inside (barriers are slow when the
// machine is oversubscribed). No allocation once warm: the block partials live in a per-thread
// scratch that grows on the first call with a larger layout.
#pragma once
#include <vector>

#include "optim/param_tensor.h"  // ParamTensor, AdamHyper

namespace ms {

struct LambHyper {
  AdamHyper adam;
  float max_trust = 0.f;        // clamp trust to [0, max_trust]; 0 = no clamp
  bool bias_correction = true;  // divide m by 1-b1^t and v by 1-b2^t
};

// Phase 1: updates m and v, writes r into `update` (same layout as params) and adds each tensor's
// sum of squares of p (before the update) to w_sq[i] and of r to r_sq[i] (arrays of
// tensors.size(); the caller zeroes them, or lets several slices accumulate).
void lamb_compute_update(const float* params, const float* grads, float* m, float* v, float* update,
                         const std::vector<ParamTensor>& tensors, int t, const LambHyper& h,
                         double* w_sq, double* r_sq);

// Phase 2: p -= lr * trust_i * update for each tensor, trust_i from the (reduced) sums.
void lamb_apply_update(float* params, const float* update, const std::vector<ParamTensor>& tensors,
                       float lr, const LambHyper& h, const double* w_sq, const double* r_sq);

// Both phases in one process (unsharded): phase 1 with zeroed sums, then phase 2.
void lamb_update(float* params, const float* grads, float* m, float* v, float* update,
                 const std::vector<ParamTensor>& tensors, float lr, int t, const LambHyper& h);

// ||p|| / ||r|| with the zero guards and the optional clamp (max_trust > 0), rounded to float.
float lamb_trust_ratio(double w_norm, double r_norm, float max_trust);

}  // namespace ms
