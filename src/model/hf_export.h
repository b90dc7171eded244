// hf_export: the trained model as a Hugging Face folder: model.safetensors with the Hugging Face
// tensor names and layouts of its family plus config.json.
//  - A model GPT-2's names hold (param_layout.h: gpt2_names) is a GPT2LMHeadModel folder: Conv1D
//    weights (in, out), the token embedding cut to the real vocabulary, the LM head tied and
//    therefore absent, GPT2Config fields and megascale_* fields for the block and attention
//    variants stock GPT-2 lacks.
//  - A Llama-named model is the stock class that computes the same function: LlamaForCausalLM
//    (RMSNorm, RoPE, SwiGLU, sequential block, no biases, full attention), MistralForCausalLM (the
//    same with one sliding window on every layer) or Qwen2ForCausalLM (biases on q, k and v only);
//    nn.Linear weights (out, in) as ours, the embedding and an untied lm_head cut to the real
//    vocabulary. Any other combination (a parallel block, LayerNorm, learned positions, a GeLU MLP,
//    full attention every k-th layer) is written with the same names under the architecture
//    MegascaleForCausalLM, whose megascale_* fields name every choice; megascale imports it,
//    transformers does not.
// Refuses to write parameters that are not all finite. The folder is written under a temporary
// name and swapped in (base/atomic_file.h: publish_directory), so it is either the complete new
// export or the previous one, never partial. hf_import.h reads every such folder back.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>  // nlohmann::json

#include "model/gpt.h"

namespace ms {

// The whole model (a tensor-parallel part is refused: gather it first).
void export_hf(const GPT& model, const std::string& dir);
// The same from the whole model's flat parameters (build_param_layout(cfg) order), e.g. gathered
// over the tensor-parallel group (parallel/tp/tensor_parallel.h: gather_full_params).
void export_hf(const ModelConfig& cfg, const float* params, const std::string& dir);
// The config.json export_hf writes for cfg (architectures names the class, see above).
nlohmann::json hf_config_json(const ModelConfig& cfg);
// True when a tensor of cfg's model is stored transposed in its Hugging Face file (GPT-2's Conv1D).
bool hf_transposed(const ModelConfig& cfg, const ParamSpec& s);

}  // namespace ms
