// optim_config: the [optim] section of the config tree: optimizer, schedule, weight decay, clipping.
// Fields are declared once, in the X-macro list below (X(type, name, default, doc)); config.h builds
// loading, overrides, help, the resolved dump and validation from it.
#pragma once
#include <string>

#include "config/config_enum.h"  // MS_CONFIG_ENUM, MS_DECLARE_FIELD

namespace ms {

// optim.name: the optimizer.
enum class OptimizerKind : uint8_t { kAdamW, kLamb };
MS_CONFIG_ENUM(OptimizerKind, {OptimizerKind::kAdamW, "adamw"}, {OptimizerKind::kLamb, "lamb"})

#define MS_OPTIM_FIELDS(X)                                                                        \
  X(OptimizerKind, name, OptimizerKind::kAdamW, "optimizer: 'adamw' or 'lamb'")                                   \
  X(float, lr, 6e-4f, "peak learning rate")                                                       \
  X(float, min_lr, 6e-5f, "learning rate at the end of the cosine decay")                          \
  X(int, warmup_steps, 100, "linear warm-up steps (0 = none)")                                     \
  X(int, decay_steps, 0, "step at which the cosine decay reaches min_lr (0 = train.steps)")        \
  X(float, beta1, 0.9f, "Adam/LAMB first-moment decay")                                           \
  X(float, beta2, 0.95f, "Adam/LAMB second-moment decay")                                         \
  X(float, eps, 1e-8f, "Adam/LAMB epsilon")                                                       \
  X(float, weight_decay, 0.1f, "decoupled weight decay on matrix weights")                         \
  X(bool, decay_embeddings, false, "also apply weight decay to token/position embeddings")         \
  X(bool, decay_norm_and_bias, false, "also apply weight decay to LayerNorm parameters and biases") \
  X(float, max_trust, 0.0f, "LAMB: clamp the trust ratio to [0, max_trust]; 0 = no clamp")         \
  X(float, grad_clip, 1.0f, "clip the global gradient L2 norm to this value; 0 = off")

struct OptimConfig {
  MS_OPTIM_FIELDS(MS_DECLARE_FIELD)
  // Checks the fields of this section alone; Config::validate() runs it, then the cross-section checks.
  void validate() const;
};

}  // namespace ms
