// hf_export: the trained model as a Hugging Face GPT-2 folder: model.safetensors with HF tensor
// names and layouts (Conv1D weights (in, out), token embedding cut to the real vocabulary, LM head
// tied and therefore absent) plus config.json (GPT2Config fields, and megascale_* fields for the
// block and attention variants). Refuses to write parameters that are not all finite. The folder
// is written under a temporary name and swapped in (base/atomic_file.h: publish_directory), so it
// is either the complete new export or the previous one, never partial.
#pragma once
#include <string>

#include "model/gpt.h"

namespace ms {

// The whole model (a tensor-parallel part is refused: gather it first).
void export_hf(const GPT& model, const std::string& dir);
// The same from the whole model's flat parameters (build_param_layout(cfg) order), e.g. gathered
// over the tensor-parallel group (parallel/tp/tensor_parallel.h: gather_full_params).
void export_hf(const ModelConfig& cfg, const float* params, const std::string& dir);
// Loads such a folder back into `model` (names, shapes and finiteness checked).
void import_hf(GPT& model, const std::string& dir);

}  // namespace ms
