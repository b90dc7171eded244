// optimizer: the configured optimizer (AdamW or LAMB) with its state (first/second moments and,
// for LAMB, the update scratch), over the model's flat parameter buffer. The step counter lives
// here so that bias correction and resumption agree.
#pragma once
#include <vector>

#include "base/aligned.h"        // AlignedBuffer
#include "base/bf16.h"           // bf16_t
#include "config/config.h"         // OptimConfig
#include "optim/param_tensor.h"  // ParamTensor

namespace ms {

class Optimizer {
 public:
  Optimizer(const OptimConfig& cfg, std::vector<ParamTensor> tensors, size_t numel);
  // One update of params with grads at learning rate lr; increments the step counter first.
  // grads is read scaled by grad_scale (clipping; LAMB scales grads in place first). If bf16_out is
  // given and the optimizer can fuse it (AdamW), the updated parameters' bf16 copy is written in the
  // same pass and true is returned; otherwise false (the caller converts).
  // zero_grads: grads is left all zero (AdamW clears it in its pass; LAMB with a separate fill).
  bool step(float* params, float* grads, float lr, float grad_scale = 1.0f, bf16_t* bf16_out = nullptr,
            bool zero_grads = false);
  int steps_taken() const { return t_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }

 private:
  OptimConfig cfg_;
  std::vector<ParamTensor> tensors_;
  AlignedBuffer<float> m_, v_, update_;
  int t_ = 0;
};

}  // namespace ms
