// hf_export.cpp: see hf_export.h.
#include "model/hf_export.h"

#include <unistd.h>  // getpid

#include <cmath>       // std::isfinite
#include <filesystem>  // std::filesystem
#include <vector>

#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/atomic_file.h"  // write_file_atomic, publish_directory
#include "base/check.h"        // MS_CHECK
#include "base/safetensors.h"  // save_safetensors

namespace ms {
namespace fs = std::filesystem;

bool hf_transposed(const ModelConfig& cfg, const ParamSpec& s) {
  return gpt2_names(cfg) && s.kind == ParamKind::kWeight;  // GPT-2's Conv1D weights are (in, out)
}

namespace {

// The stock Hugging Face class that computes exactly cfg's function for a Llama-named model, or
// nullptr (then MegascaleForCausalLM).
const char* llama_family_class(const ModelConfig& cfg) {
  const bool llama_pieces = cfg.rmsnorm() && cfg.rope() && cfg.swiglu() && !cfg.parallel_block();
  if (!llama_pieces) return nullptr;
  const bool full = cfg.attention == AttentionKind::kFull;
  const bool one_window = cfg.attention == AttentionKind::kSliding && cfg.full_every == 0;
  if (cfg.bias == BiasKind::kNone && full) return "LlamaForCausalLM";
  if (cfg.bias == BiasKind::kNone && one_window) return "MistralForCausalLM";
  if (cfg.bias == BiasKind::kQkv && full) return "Qwen2ForCausalLM";
  return nullptr;
}

nlohmann::json gpt2_config(const ModelConfig& cfg) {
  return {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"},
          {"vocab_size", cfg.vocab_size}, {"n_positions", cfg.max_seq_len}, {"n_ctx", cfg.max_seq_len},
          {"n_embd", cfg.n_embd}, {"n_layer", cfg.n_layer}, {"n_head", cfg.n_head},
          {"activation_function", "gelu_new"}, {"layer_norm_epsilon", cfg.norm_eps},
          {"initializer_range", cfg.init_std}, {"tie_word_embeddings", true},
          {"bos_token_id", 50256}, {"eos_token_id", 50256},
          {"megascale_block", config_name(cfg.block)}, {"megascale_attention", config_name(cfg.attention)},
          {"megascale_window", cfg.attention == AttentionKind::kSliding ? cfg.window : 0},
          {"megascale_full_every", cfg.full_every}};
}

nlohmann::json llama_config(const ModelConfig& cfg) {
  const char* stock = llama_family_class(cfg);
  const std::string arch = stock ? stock : "MegascaleForCausalLM";
  const std::string type = arch == "MistralForCausalLM" ? "mistral" : arch == "Qwen2ForCausalLM" ? "qwen2"
                           : arch == "LlamaForCausalLM" ? "llama" : "megascale";
  nlohmann::json c = {
      {"architectures", {arch}}, {"model_type", type},
      {"vocab_size", cfg.vocab_size}, {"hidden_size", cfg.n_embd}, {"intermediate_size", cfg.ffn()},
      {"num_hidden_layers", cfg.n_layer}, {"num_attention_heads", cfg.n_head},
      {"num_key_value_heads", cfg.kv_heads()}, {"head_dim", cfg.head_size()},
      {"max_position_embeddings", cfg.max_seq_len}, {"rms_norm_eps", cfg.norm_eps},
      {"rope_theta", cfg.rope_theta}, {"rope_scaling", nullptr}, {"hidden_act", "silu"},
      {"tie_word_embeddings", cfg.tie_embeddings}, {"initializer_range", cfg.init_std},
      {"attention_dropout", 0.0}, {"torch_dtype", "float32"}};
  if (type == "llama") { c["attention_bias"] = false; c["mlp_bias"] = false; c["pretraining_tp"] = 1; }
  if (type == "mistral") c["sliding_window"] = cfg.window;
  if (type == "qwen2") { c["use_sliding_window"] = false; c["sliding_window"] = nullptr; }
  if (type == "megascale") {  // every choice named (hf_import.h reads them back)
    c["megascale_norm"] = config_name(cfg.norm);
    c["megascale_positions"] = config_name(cfg.positions);
    c["megascale_mlp"] = config_name(cfg.mlp);
    c["megascale_bias"] = config_name(cfg.bias);
    c["megascale_block"] = config_name(cfg.block);
    c["megascale_attention"] = config_name(cfg.attention);
    c["megascale_window"] = cfg.attention == AttentionKind::kSliding ? cfg.window : 0;
    c["megascale_full_every"] = cfg.full_every;
  }
  return c;
}

}  // namespace

nlohmann::json hf_config_json(const ModelConfig& cfg) { return gpt2_names(cfg) ? gpt2_config(cfg) : llama_config(cfg); }

void export_hf(const GPT& model, const std::string& dir) {
  MS_CHECK(model.has_embedding() && model.has_head(), "export {}: the model is the pipeline chunk of layers [{}, {}); "
           "export the whole model (gathered over the pipeline) with export_hf(config, params, dir)", dir,
           model.first_layer(), model.first_layer() + model.num_layers());
  MS_CHECK(model.shard().parts == 1, "export {}: the model is part {} of {}; export the whole model (gathered over the "
           "tensor-parallel group) with export_hf(config, params, dir)", dir, model.shard().index, model.shard().parts);
  if (model.device() == Device::kCpu) {
    export_hf(model.config(), model.params(), dir);
    return;
  }
  std::vector<float> host(model.num_params());  // a GPU model: its host copy
  model.copy_params_to_host(host.data());
  export_hf(model.config(), host.data(), dir);
}

void export_hf(const ModelConfig& cfg, const float* P, const std::string& dir) {
  const ParamLayout layout = build_param_layout(cfg);
  for (size_t i = 0; i < layout.total; i++)
    MS_CHECK(std::isfinite(P[i]), "export {}: parameter {} is not finite; refusing to publish the model", dir, i);
  StFile f;
  for (const ParamSpec& s : layout.specs) {
    const float* p = P + s.offset;
    if (hf_transposed(cfg, s)) {
      int O = s.shape[0], I = s.shape[1];
      std::vector<float> t(static_cast<size_t>(O) * I);
      for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) t[static_cast<size_t>(i) * O + o] = p[static_cast<size_t>(o) * I + i];
      f.tensors[s.name] = st_f32({I, O}, t.data());
    } else if (s.offset == layout.wte || s.offset == layout.head) {  // padded vocabulary rows left out
      f.tensors[s.name] = st_f32({cfg.vocab_size, s.shape[1]}, p);
    } else {
      f.tensors[s.name] = st_f32(std::vector<int64_t>(s.shape.begin(), s.shape.end()), p);
    }
  }
  f.metadata["format"] = "pt";
  // Written in full under a temporary name, then swapped in (base/atomic_file.h): the previous
  // export stays in place until the new one is complete and durable.
  const fs::path final_dir = fs::absolute(dir);
  const fs::path tmp_dir = final_dir.string() + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp_dir);
  if (final_dir.has_parent_path()) fs::create_directories(final_dir.parent_path());
  fs::create_directories(tmp_dir);
  save_safetensors((tmp_dir / "model.safetensors").string(), f);
  write_text_atomic((tmp_dir / "config.json").string(), hf_config_json(cfg).dump(2) + "\n");
  publish_directory(tmp_dir.string(), final_dir.string());
}

}  // namespace ms
