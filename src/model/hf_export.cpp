// hf_export.cpp: see hf_export.h.
#include "model/hf_export.h"

#include <cmath>       // std::isfinite
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ofstream

#include <fmt/ranges.h>         // fmt::join
#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/check.h"        // MS_CHECK
#include "base/safetensors.h"  // save_safetensors, load_safetensors

namespace ms {
namespace fs = std::filesystem;

namespace {
// Our nn.Linear-layout weights are transposed to HF's Conv1D (in, out) layout.
bool is_conv1d(const ParamSpec& s) { return s.kind == ParamKind::kWeight; }
}  // namespace

void export_hf(const GPT& model, const std::string& dir) {
  const ModelConfig& cfg = model.config();
  const float* P = model.params();
  for (size_t i = 0; i < model.num_params(); i++)
    MS_CHECK(std::isfinite(P[i]), "export {}: parameter {} is not finite; refusing to publish the model", dir, i);
  StFile f;
  for (const ParamSpec& s : model.param_specs()) {
    const float* p = P + s.offset;
    if (is_conv1d(s)) {
      int O = s.shape[0], I = s.shape[1];
      std::vector<float> t(static_cast<size_t>(O) * I);
      for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) t[static_cast<size_t>(i) * O + o] = p[static_cast<size_t>(o) * I + i];
      f.tensors[s.name] = st_f32({I, O}, t.data());
    } else if (s.name == "transformer.wte.weight") {
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
      {"megascale_block", cfg.block}, {"megascale_attention", cfg.attention},
      {"megascale_window", cfg.attention == "sliding" ? cfg.window : 0},
      {"megascale_full_every", cfg.full_every}};
  fs::path final_dir(dir), tmp_dir(dir + ".tmp");
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);
  save_safetensors((tmp_dir / "model.safetensors").string(), f);
  {
    std::ofstream out(tmp_dir / "config.json");
    out << c.dump(2) << "\n";
    MS_SYSCHECK(out.good(), "{}: cannot write config.json", tmp_dir.string());
  }
  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
}

void import_hf(GPT& model, const std::string& dir) {
  const std::string path = (fs::path(dir) / "model.safetensors").string();
  StFile f = load_safetensors(path);
  const ModelConfig& cfg = model.config();
  float* P = model.params();
  for (const ParamSpec& s : model.param_specs()) {
    auto it = f.tensors.find(s.name);
    MS_CHECK(it != f.tensors.end(), "{}: missing tensor '{}'", path, s.name);
    const StTensor& t = it->second;
    MS_CHECK(t.dtype == "F32", "{}: tensor '{}' has dtype {}, expected F32", path, s.name, t.dtype);
    std::vector<int64_t> want(s.shape.begin(), s.shape.end());
    if (is_conv1d(s)) std::swap(want[0], want[1]);
    if (s.name == "transformer.wte.weight") want[0] = cfg.vocab_size;
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
      if (s.name == "transformer.wte.weight")
        std::fill(p + t.numel(), p + s.numel(), 0.0f);
    }
  }
}

}  // namespace ms
