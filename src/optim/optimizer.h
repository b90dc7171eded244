// optimizer: the one dispatch of an optimizer update (AdamW or LAMB, optim.name) with its state
// (first/second moments and, for LAMB, the update scratch), over flat buffers split into
// ParamTensor views. The single-process trainer runs it over the whole model; ZeRO-2
// (parallel/dp/zero_dp.h) runs it over its shard, whose views are pieces of tensors split across
// ranks, and supplies the cross-rank reduction LAMB's per-tensor norms need (set_norm_reduce).
// The step counter lives here so that bias correction and resumption agree.
// Device::kCuda: the buffers passed to step() and the moments are device memory, and the update
// runs on the GPU through kernels/optim_kernels.h (the same arithmetic per element; LAMB's norms
// and the trust ratio come back to the host as doubles, one read-back per tensor).
// Guarantees: a step allocates nothing; results do not depend on the thread count.
#pragma once
#include <functional>
#include <vector>

#include "base/bf16.h"            // bf16_t
#include "base/device_array.h"    // DeviceArray, Device
#include "config/optim_config.h"  // OptimConfig
#include "optim/param_tensor.h"   // ParamTensor

namespace ms {

class Optimizer {
 public:
  // tensors: views into buffers of numel elements (params, grads passed to step()).
  // device: where params, grads and the moments live.
  Optimizer(const OptimConfig& cfg, std::vector<ParamTensor> tensors, size_t numel, Device device = Device::kCpu);

  // LAMB only: called between the norm phase and the apply phase with this optimizer's partial
  // sums of squares per view (w_sq: weights before the update, r_sq: the update; one entry per
  // tensors()[i]); it must replace each with the sum over the whole tensor the view belongs to
  // (across ranks, added in a fixed order). Without it, each view is taken as a whole tensor.
  using NormReduce = std::function<void(double* w_sq, double* r_sq)>;
  void set_norm_reduce(NormReduce fn) { norm_reduce_ = std::move(fn); }

  // One update of params with grads at learning rate lr; increments the step counter first.
  // grads is read scaled by grad_scale (clipping; LAMB scales grads in place first). If bf16_out is
  // given and the optimizer can fuse it (AdamW), the updated parameters' bf16 copy is written in the
  // same pass and true is returned; otherwise false (the caller converts).
  // zero_grads: grads is left all zero (AdamW clears it in its pass; LAMB with a separate fill).
  bool step(float* params, float* grads, float lr, float grad_scale = 1.0f, bf16_t* bf16_out = nullptr,
            bool zero_grads = false);
  int steps_taken() const { return t_; }
  // The first and second moments (same layout as the params passed to step(), on the optimizer's
  // device) and the step counter, for checkpoints: saved as they are, restored before the next step.
  float* moment1() { return m_.data(); }
  float* moment2() { return v_.data(); }
  void set_steps_taken(int t) { t_ = t; }
  Device device() const { return m_.device(); }
  // Host copies of / writes to the moments (any device), numel elements each.
  void copy_moments_to_host(float* m, float* v) const;
  void load_moments(const float* m, const float* v);
  void zero_moments();
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t state_bytes() const { return (m_.size() + v_.size() + update_.size()) * sizeof(float); }

 private:
  OptimConfig cfg_;
  std::vector<ParamTensor> tensors_;
  bool step_on_device(float* params, float* grads, float lr, float grad_scale, bf16_t* bf16_out, bool zero_grads);

  DeviceArray<float> m_, v_, update_;
  std::vector<double> w_sq_, r_sq_;  // LAMB norms per view
  NormReduce norm_reduce_;
  int t_ = 0;
};

}  // namespace ms
