// optimizer.cpp: see optimizer.h.
#include "optimizer.h"

#include "adamw.h"  // adamw_update
#include "lamb.h"   // lamb_update

namespace ms {

Optimizer::Optimizer(const OptimConfig& cfg, std::vector<ParamTensor> tensors, size_t numel)
    : cfg_(cfg), tensors_(std::move(tensors)), m_(numel), v_(numel) {
  if (cfg_.name == "lamb") update_.resize(numel);
}

void Optimizer::step(float* params, const float* grads, float lr) {
  t_++;
  AdamHyper h{cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay};
  if (cfg_.name == "lamb") {
    LambHyper lh{h, cfg_.max_trust, true};
    lamb_update(params, grads, m_.data(), v_.data(), update_.data(), tensors_, lr, t_, lh);
  } else {
    adamw_update(params, grads, m_.data(), v_.data(), tensors_, lr, t_, h);
  }
}

}  // namespace ms
