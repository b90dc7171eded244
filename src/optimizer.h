// optimizer: the configured optimizer (AdamW or LAMB) with its state (first/second moments and,
// for LAMB, the update scratch), over the model's flat parameter buffer. The step counter lives
// here so that bias correction and resumption agree.
#pragma once
#include <vector>

#include "aligned.h"        // AlignedBuffer
#include "config.h"         // OptimConfig
#include "optim_tensors.h"  // ParamTensor

namespace ms {

class Optimizer {
 public:
  Optimizer(const OptimConfig& cfg, std::vector<ParamTensor> tensors, size_t numel);
  // One update of params with grads at learning rate lr; increments the step counter first.
  void step(float* params, const float* grads, float lr);
  int steps_taken() const { return t_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }

 private:
  OptimConfig cfg_;
  std::vector<ParamTensor> tensors_;
  AlignedBuffer<float> m_, v_, update_;
  int t_ = 0;
};

}  // namespace ms
