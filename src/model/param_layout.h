// param_layout: where every parameter tensor of the GPT lives in the one flat parameter buffer
// (and, at the same offsets, in the gradient buffer and the bf16 weight copy). Names are Hugging
// Face GPT-2 names; shapes are our layout (nn.Linear (out, in) for weights). Order: token and
// position embeddings, then each block's tensors, then the final LayerNorm, so a forward reads
// ranges in increasing offset order and a backward finishes them in decreasing order.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "config/model_config.h"  // ModelConfig

namespace ms {

// What a parameter tensor is (optim/decay_policy.h decides weight decay from it; the Hugging Face
// export names it).
enum class ParamKind { kEmbedding, kNorm, kBias, kWeight };

// One named parameter tensor inside the flat buffer.
struct ParamSpec {
  std::string name;         // e.g. "transformer.h.0.attn.c_attn.weight"
  size_t offset = 0;        // into the flat parameter buffer
  std::vector<int> shape;   // our layout: nn.Linear (out, in) for weights
  ParamKind kind = ParamKind::kWeight;
  float init_std = 0;       // 0: constant init (ones for LN weight, zeros otherwise)
  size_t numel() const;
};

struct ParamLayout {
  std::vector<ParamSpec> specs;        // every tensor, in offset order
  std::vector<size_t> block_offset;    // offset of each block's first tensor
  size_t wte = 0, wpe = 0, lnf_w = 0, lnf_b = 0;
  size_t total = 0;                    // elements of the flat buffer
};

// The layout of cfg's model (sequential blocks have ln_2, parallel blocks do not; the token
// embedding has Vp = padded_vocab() rows).
ParamLayout build_param_layout(const ModelConfig& cfg);

}  // namespace ms
