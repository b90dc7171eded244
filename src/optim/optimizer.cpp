// optimizer.cpp: see optimizer.h.
#include "optim/optimizer.h"

#include <algorithm>  // std::fill
#include <cmath>      // std::sqrt

#include "kernels/optim_kernels.h"  // cuda_optim_kernels
#include "optim/adamw.h"      // adamw_update
#include "optim/grad_norm.h"  // scale_inplace
#include "optim/lamb.h"       // lamb_compute_update, lamb_apply_update

namespace ms {

Optimizer::Optimizer(const OptimConfig& cfg, std::vector<ParamTensor> tensors, size_t numel, Device device)
    : cfg_(cfg), tensors_(std::move(tensors)) {
  m_.resize(numel, device);
  v_.resize(numel, device);
  if (cfg_.name == OptimizerKind::kLamb) {
    update_.resize(numel, device);
    w_sq_.resize(tensors_.size());
    r_sq_.resize(tensors_.size());
  }
}

void Optimizer::copy_moments_to_host(float* m, float* v) const {
  m_.download(m, m_.size());
  v_.download(v, v_.size());
}

void Optimizer::load_moments(const float* m, const float* v) {
  m_.upload(m, m_.size());
  v_.upload(v, v_.size());
}

void Optimizer::zero_moments() {
  m_.zero();
  v_.zero();
}

bool Optimizer::step(float* params, float* grads, float lr, float grad_scale, bf16_t* bf16_out, bool zero_grads) {
  t_++;
  if (device() == Device::kCuda) return step_on_device(params, grads, lr, grad_scale, bf16_out, zero_grads);
  const AdamHyper h{cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay};
  switch (cfg_.name) {
    case OptimizerKind::kAdamW:
      adamw_update(params, grads, m_.data(), v_.data(), tensors_, lr, t_, h, grad_scale, bf16_out, zero_grads);
      return bf16_out != nullptr;
    case OptimizerKind::kLamb: {
      if (grad_scale != 1.0f)
        for (const ParamTensor& t : tensors_) scale_inplace(grads + t.offset, t.numel, grad_scale);
      const LambHyper lh{h, cfg_.max_trust, true};
      std::fill(w_sq_.begin(), w_sq_.end(), 0.0);
      std::fill(r_sq_.begin(), r_sq_.end(), 0.0);
      lamb_compute_update(params, grads, m_.data(), v_.data(), update_.data(), tensors_, t_, lh, w_sq_.data(),
                          r_sq_.data());
      if (norm_reduce_) norm_reduce_(w_sq_.data(), r_sq_.data());
      lamb_apply_update(params, update_.data(), tensors_, lr, lh, w_sq_.data(), r_sq_.data());
      if (zero_grads)
        for (const ParamTensor& t : tensors_) std::fill(grads + t.offset, grads + t.offset + t.numel, 0.0f);
      return false;
    }
  }
  return false;
}

// The CPU step's sequence, one tensor per kernel call: AdamW fuses the scale, the bf16 copy and the
// zeroing; LAMB scales first, then phase 1 per tensor (norms back on the host), the reduce hook,
// the trust ratios on the host (lamb_trust_ratio) and phase 2.
bool Optimizer::step_on_device(float* params, float* grads, float lr, float grad_scale, bf16_t* bf16_out,
                               bool zero_grads) {
  OptimKernels& k = cuda_optim_kernels();
  float* M = m_.data();
  float* V = v_.data();
  if (cfg_.name == OptimizerKind::kAdamW) {
    for (const ParamTensor& t : tensors_)
      k.adamw_update(params + t.offset, grads + t.offset, M + t.offset, V + t.offset, t.numel, t.decay, lr, t_,
                     cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, grad_scale,
                     bf16_out ? bf16_out + t.offset : nullptr, zero_grads);
    return bf16_out != nullptr;
  }
  if (grad_scale != 1.0f)
    for (const ParamTensor& t : tensors_) k.scale(grads + t.offset, t.numel, grad_scale);
  for (size_t i = 0; i < tensors_.size(); i++) {
    const ParamTensor& t = tensors_[i];
    k.lamb_compute_update(params + t.offset, grads + t.offset, M + t.offset, V + t.offset, update_.data() + t.offset,
                          t.numel, t.decay, t_, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, true, &w_sq_[i],
                          &r_sq_[i]);
  }
  if (norm_reduce_) norm_reduce_(w_sq_.data(), r_sq_.data());
  for (size_t i = 0; i < tensors_.size(); i++) {
    const ParamTensor& t = tensors_[i];
    const float step = lr * lamb_trust_ratio(std::sqrt(w_sq_[i]), std::sqrt(r_sq_[i]), cfg_.max_trust);
    k.lamb_apply_update(params + t.offset, update_.data() + t.offset, t.numel, step);
    if (zero_grads) k.fill(grads + t.offset, t.numel, 0.0f);
  }
  return false;
}

}  // namespace ms
