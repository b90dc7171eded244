// optimizer.cpp: see optimizer.h.
#include "optim/optimizer.h"

#include <algorithm>  // std::fill

#include "optim/adamw.h"  // adamw_update
#include "optim/grad_norm.h"  // scale_inplace
#include "optim/lamb.h"   // lamb_update

namespace ms {

Optimizer::Optimizer(const OptimConfig& cfg, std::vector<ParamTensor> tensors, size_t numel)
    : cfg_(cfg), tensors_(std::move(tensors)), m_(numel), v_(numel) {
  if (cfg_.name == "lamb") update_.resize(numel);
}

bool Optimizer::step(float* params, float* grads, float lr, float grad_scale, bf16_t* bf16_out, bool zero_grads) {
  t_++;
  AdamHyper h{cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay};
  if (cfg_.name == "lamb") {
    if (grad_scale != 1.0f)
      for (const ParamTensor& t : tensors_) scale_inplace(grads + t.offset, t.numel, grad_scale);
    LambHyper lh{h, cfg_.max_trust, true};
    lamb_update(params, grads, m_.data(), v_.data(), update_.data(), tensors_, lr, t_, lh);
    if (zero_grads)
      for (const ParamTensor& t : tensors_) std::fill(grads + t.offset, grads + t.offset + t.numel, 0.0f);
    return false;
  }
  adamw_update(params, grads, m_.data(), v_.data(), tensors_, lr, t_, h, grad_scale, bf16_out, zero_grads);
  return bf16_out != nullptr;
}

}  // namespace ms
