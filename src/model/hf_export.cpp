// hf_export.cpp: see hf_export.h.
#include "model/hf_export.h"

#include <unistd.h>  // getpid

#include <cmath>       // std::isfinite
#include <filesystem>  // std::filesystem
#include <vector>

#include <fmt/ranges.h>         // fmt::join
#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/atomic_file.h"  // write_file_atomic, publish_directory
#include "base/check.h"        // MS_CHECK
#include "base/safetensors.h"  // save_safetensors, load_safetensors

namespace ms {
namespace fs = std::filesystem;

namespace {
// Our nn.Linear-layout weights are transposed to HF's Conv1D (in, out) layout.
bool is_conv1d(const ParamSpec& s) { return s.kind == ParamKind::kWeight; }
}  // namespace

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
    if (is_conv1d(s)) {
      int O = s.shape[0], I = s.shape[1];
      std::vector<float> t(static_cast<size_t>(O) * I);
      for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) t[static_cast<size_t>(i) * O + o] = p[static_cast<size_t>(o) * I + i];
      f.tensors[s.name] = st_f32({I, O}, t.data());
    } else if (s.name == kTokenEmbeddingName) {
      f.tensors[s.name] = st_f32({cfg.vocab_size, s.shape[1]}, p);
    } else {
      f.tensors[s.name] = st_f32(std::vector<int64_t>(s.shape.begin(), s.shape.end()), p);
    }
  }
  f.metadata["format"] = "pt";
  nlohmann::json c = {
      {"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"},
      {"vocab_size", cfg.vocab_size}, {"n_positions", cfg.max_seq_len}, {"n_ctx", cfg.max_seq_len},
      {"n_embd", cfg.n_embd}, {"n_layer", cfg.n_layer}, {"n_head", cfg.n_head},
      {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5},
      {"initializer_range", cfg.init_std}, {"tie_word_embeddings", true},
      {"bos_token_id", 50256}, {"eos_token_id", 50256},
      {"megascale_block", config_name(cfg.block)}, {"megascale_attention", config_name(cfg.attention)},
      {"megascale_window", cfg.attention == AttentionKind::kSliding ? cfg.window : 0},
      {"megascale_full_every", cfg.full_every}};
  // Written in full under a temporary name, then swapped in (base/atomic_file.h): the previous
  // export stays in place until the new one is complete and durable.
  const fs::path final_dir = fs::absolute(dir);
  const fs::path tmp_dir = final_dir.string() + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp_dir);
  if (final_dir.has_parent_path()) fs::create_directories(final_dir.parent_path());
  fs::create_directories(tmp_dir);
  save_safetensors((tmp_dir / "model.safetensors").string(), f);
  const std::string text = c.dump(2) + "\n";
  write_text_atomic((tmp_dir / "config.json").string(), text);
  publish_directory(tmp_dir.string(), final_dir.string());
}

void import_hf(GPT& model, const std::string& dir) {
  const std::string path = (fs::path(dir) / "model.safetensors").string();
  StFile f = load_safetensors(path);
  const ModelConfig& cfg = model.config();
  std::vector<float> host(model.device() == Device::kCpu ? 0 : model.num_params());
  float* P = model.device() == Device::kCpu ? model.params() : host.data();  // a GPU model: written through host memory
  for (const ParamSpec& s : model.param_specs()) {
    auto it = f.tensors.find(s.name);
    MS_CHECK(it != f.tensors.end(), "{}: missing tensor '{}'", path, s.name);
    const StTensor& t = it->second;
    MS_CHECK(t.dtype == DType::kF32, "{}: tensor '{}' has dtype {}, expected F32", path, s.name, safetensors_dtype(t.dtype));
    std::vector<int64_t> want(s.shape.begin(), s.shape.end());
    if (is_conv1d(s)) std::swap(want[0], want[1]);
    if (s.name == kTokenEmbeddingName) want[0] = cfg.vocab_size;
    MS_CHECK(t.shape == want, "{}: tensor '{}' has shape [{}], expected [{}]", path, s.name,
             fmt::join(t.shape, ","), fmt::join(want, ","));
    const float* src = t.f32();
    for (size_t i = 0; i < t.numel(); i++)
      MS_CHECK(std::isfinite(src[i]), "{}: tensor '{}' holds a non-finite value at {}", path, s.name, i);
    float* p = P + s.offset;
    if (is_conv1d(s)) {
      int O = s.shape[0], I = s.shape[1];
      for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) p[static_cast<size_t>(o) * I + i] = src[static_cast<size_t>(i) * O + o];
    } else {
      std::copy(src, src + t.numel(), p);
      if (s.name == kTokenEmbeddingName)
        std::fill(p + t.numel(), p + s.numel(), 0.0f);
    }
  }
  if (model.device() != Device::kCpu) model.load_params(host.data());
}

}  // namespace ms
