// decay_policy.cpp: see decay_policy.h.
#include "optim/decay_policy.h"

namespace ms {

bool decays(ParamKind kind, const OptimConfig& cfg) {
  switch (kind) {
    case ParamKind::kWeight: return true;
    case ParamKind::kEmbedding: return cfg.decay_embeddings;
    case ParamKind::kNorm:
    case ParamKind::kBias: return cfg.decay_norm_and_bias;
  }
  return true;
}

std::vector<ParamTensor> optimizer_tensors(const std::vector<ParamSpec>& specs, const OptimConfig& cfg) {
  std::vector<ParamTensor> out;
  out.reserve(specs.size());
  for (const ParamSpec& s : specs) out.push_back(ParamTensor{s.name, s.offset, s.numel(), decays(s.kind, cfg)});
  return out;
}

}  // namespace ms
