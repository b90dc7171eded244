// hf_import: Hugging Face folders in. A folder holds config.json and model.safetensors, or a
// sharded model.safetensors.index.json naming the file of every tensor. Read are GPT2LMHeadModel,
// LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM folders (as transformers writes them,
// F32, F16 or BF16) and megascale's own exports (hf_export.h, MegascaleForCausalLM included).
// Guarantees: every mismatch is an ms::Error naming the file, the field or tensor, and the reason,
// before any parameter is written: a config field megascale does not implement (rope scaling,
// sliding-window layouts other than one window everywhere, activations other than the family's,
// biases on some layers only, tensor-parallel pretraining splits, head_dim other than
// hidden/heads), a missing or extra tensor, a shape, a dtype, a non-finite value, a vocabulary the
// checkpoint and the config disagree on. Buffers that are not parameters (GPT-2's attention masks
// attn.bias / attn.masked_bias, Llama's rotary_emb.inv_freq) are skipped; a tied LM head stored
// anyway (lm_head.weight) must equal the embedding. Tensors are converted to fp32 exactly.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "config/model_config.h"  // ModelConfig
#include "model/gpt.h"            // GPT
#include "model/param_layout.h"   // ParamSpec

namespace ms {

// The model section the folder's config.json describes: the architecture's fields from the folder,
// the rest (pad_vocab_to, init_std, recompute, recompute_every) from `base`.
ModelConfig hf_model_config(const std::string& dir, const ModelConfig& base);

// The folder's tensors, checked against the whole model of `cfg` when opened.
class HfWeights {
 public:
  HfWeights(const std::string& dir, const ModelConfig& cfg);
  ~HfWeights();
  HfWeights(HfWeights&&) noexcept;
  // The whole tensor s names (s.full_numel floats), in our layout: nn.Linear (out, in), the
  // vocabulary rows padded with zeros to Vp.
  std::vector<float> read(const ParamSpec& s) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Loads the folder into `model` (its own part: a tensor-parallel slice, a pipeline chunk), after
// checking that the folder's config describes the model's config (each differing field named).
void import_hf(GPT& model, const std::string& dir);

}  // namespace ms
