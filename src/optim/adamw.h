// adamw: Adam with decoupled weight decay (Loshchilov & Hutter), numerically the same as
// torch.optim.AdamW (torch 1.13, single-tensor path, AVX2 CPU kernels), step by step:
//   p *= float(1 - lr*wd)                      (only tensors with decay)
//   m  = fma(g, 1-b1, m*b1)                    (torch: m.mul_(b1).add_(g, alpha=1-b1))
//   v  = fma((1-b2)*g, g, v*b2)                (torch: v.mul_(b2).addcmul_(g, g, value=1-b2))
//   p += (-(lr/bc1) * m) / (sqrt(v)/sqrt(bc2) + eps),   bc1 = 1-b1^t, bc2 = 1-b2^t
// Scalars are formed in double and rounded to float once, as torch does with Python floats.
// That is p -= lr * (mhat/(sqrt(vhat)+eps) + wd*p) with p decayed first. t counts from 1.
// Elementwise, OpenMP-parallel, no allocation; bit-identical for any thread count and for the
// AVX2 and scalar paths.
#pragma once
#include <vector>

#include "base/bf16.h"           // bf16_t
#include "optim/param_tensor.h"  // ParamTensor, AdamHyper

namespace ms {

// Updates params, m and v in place for every tensor (params, grads, m, v share one layout).
// Fused extras of the same pass (each saves a sweep over the model's memory):
//  grad_scale: the gradient is read as float(g * grad_scale), bit-identical to scaling the
//    gradient in place first (clipping: grad_norm.h scale_inplace); grads itself is not written.
//  bf16_out (same layout, may be nullptr): receives the updated parameter rounded to bf16 (round to
//    nearest even, exact for every input: bf16.h f32_to_bf16_rne), the weight copy of bf16 training.
//  zero_grads: grads is set to 0 after it is read (the next step's zero_grad, without a pass of
//    its own: the cache lines are already owned).
void adamw_update(float* params, float* grads, float* m, float* v,
                  const std::vector<ParamTensor>& tensors, float lr, int t, const AdamHyper& h,
                  float grad_scale = 1.0f, bf16_t* bf16_out = nullptr, bool zero_grads = false);

}  // namespace ms
