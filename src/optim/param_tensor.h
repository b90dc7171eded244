// param_tensor: how the optimizers see the model. Parameters, gradients and optimizer state are
// flat fp32 buffers with one layout; a list of named ParamTensor views (offset, numel) splits them
// into tensors, and each tensor says whether weight decay applies to it (decay_policy.h decides).
// The tensors must be disjoint.
#pragma once
#include <cstddef>    // size_t
#include <string>
#include <vector>

namespace ms {

// One tensor inside the flat parameter buffer: elements [offset, offset + numel).
struct ParamTensor {
  std::string name;
  size_t offset = 0;
  size_t numel = 0;
  bool decay = true;  // weight decay applies (the model turns it off for biases, LayerNorm, embeddings)
};

// Adam moments and decoupled weight decay; shared by AdamW and LAMB.
struct AdamHyper {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // applied only to tensors with decay == true
};

}  // namespace ms
