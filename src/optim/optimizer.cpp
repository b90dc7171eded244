// optimizer.cpp: see optimizer.h.
#include "optim/optimizer.h"

#include <algorithm>  // std::fill

#include "optim/adamw.h"      // adamw_update
#include "optim/grad_norm.h"  // scale_inplace
#include "optim/lamb.h"       // lamb_compute_update, lamb_apply_update

namespace ms {

Optimizer::Optimizer(const OptimConfig& cfg, std::vector<ParamTensor> tensors, size_t numel)
    : cfg_(cfg), tensors_(std::move(tensors)), m_(numel), v_(numel) {
  if (cfg_.name == OptimizerKind::kLamb) {
    update_.resize(numel);
    w_sq_.resize(tensors_.size());
    r_sq_.resize(tensors_.size());
  }
}

bool Optimizer::step(float* params, float* grads, float lr, float grad_scale, bf16_t* bf16_out, bool zero_grads) {
  t_++;
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

}  // namespace ms
