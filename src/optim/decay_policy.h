// decay_policy: which parameter tensors weight decay applies to. The model only says what each
// tensor is (model/param_layout.h: ParamKind); this is the optimizer's decision: matrix weights always decay,
// embeddings only with optim.decay_embeddings, LayerNorm parameters and biases only with
// optim.decay_norm_and_bias. The result is the optimizer's view of the model (param_tensor.h).
#pragma once
#include <vector>

#include "config/config.h"     // OptimConfig
#include "model/param_layout.h"  // ParamSpec, ParamKind
#include "optim/param_tensor.h"  // ParamTensor

namespace ms {

bool decays(ParamKind kind, const OptimConfig& cfg);

// One ParamTensor per spec, in spec order, with decay set by decays().
std::vector<ParamTensor> optimizer_tensors(const std::vector<ParamSpec>& specs, const OptimConfig& cfg);

}  // namespace ms
