// hf_import.cpp: see hf_import.h.
#include "model/hf_import.h"

#include <cmath>       // std::isfinite
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream
#include <map>
#include <set>

#include <fmt/ranges.h>         // fmt::join
#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/check.h"        // MS_CHECK, MS_FAIL
#include "base/safetensors.h"  // StMapped, to_f32
#include "model/hf_export.h"   // hf_transposed

namespace ms {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  MS_CHECK(in.good(), "{}: cannot be opened (a Hugging Face folder holds config.json)", path);
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    MS_FAIL("{}: not valid JSON: {}", path, e.what());
  }
}

// Typed access to config.json's fields, every error naming the file and the field.
struct ConfigFields {
  const json& j;
  std::string path;
  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  int integer(const char* k) const {
    MS_CHECK(has(k) && j[k].is_number_integer(), "{}: field '{}' is missing or not an integer", path, k);
    const int64_t v = j[k].get<int64_t>();
    MS_CHECK(v > 0 && v <= (1 << 30), "{}: field '{}' = {} is out of range", path, k, v);
    return static_cast<int>(v);
  }
  int integer_or(const char* k, int def) const { return has(k) ? integer(k) : def; }
  double number_or(const char* k, double def) const {
    if (!has(k)) return def;
    MS_CHECK(j[k].is_number(), "{}: field '{}' is not a number", path, k);
    return j[k].get<double>();
  }
  bool boolean_or(const char* k, bool def) const {
    if (!has(k)) return def;
    MS_CHECK(j[k].is_boolean(), "{}: field '{}' is not true or false", path, k);
    return j[k].get<bool>();
  }
  std::string text_or(const char* k, const std::string& def) const {
    if (!has(k)) return def;
    MS_CHECK(j[k].is_string(), "{}: field '{}' is not a string", path, k);
    return j[k].get<std::string>();
  }
  template <class E>
  E choice_or(const char* k, E def) const {
    if (!has(k)) return def;
    const std::optional<E> v = parse_config_enum<E>(text_or(k, ""));
    MS_CHECK(v.has_value(), "{}: field '{}' = {} must be {}", path, k, j[k].dump(), config_choices<E>());
    return *v;
  }
  void unsupported(bool bad, const char* k, const std::string& why) const {
    MS_CHECK(!bad, "{}: field '{}' = {}: {}, which megascale does not implement", path, k, has(k) ? j[k].dump() : "?",
             why);
  }
};

// The megascale_* fields of megascale's own exports (block and attention variants).
void read_variants(const ConfigFields& f, ModelConfig& m) {
  m.block = f.choice_or("megascale_block", BlockKind::kSequential);
  m.attention = f.choice_or("megascale_attention", AttentionKind::kFull);
  if (m.attention == AttentionKind::kSliding) m.window = f.integer("megascale_window");
  m.full_every = f.has("megascale_full_every") ? f.j["megascale_full_every"].get<int>() : 0;
}

void read_gpt2(const ConfigFields& f, ModelConfig& m) {
  m.n_embd = f.integer("n_embd");
  m.n_layer = f.integer("n_layer");
  m.n_head = f.integer("n_head");
  m.n_kv_head = 0;
  m.max_seq_len = f.integer("n_positions");
  m.norm = NormKind::kLayerNorm;
  m.norm_eps = static_cast<float>(f.number_or("layer_norm_epsilon", 1e-5));
  m.positions = PositionKind::kLearned;
  m.mlp = MlpKind::kGelu;
  m.ffn_hidden = 0;
  m.tie_embeddings = true;
  m.bias = BiasKind::kAll;
  const std::string act = f.text_or("activation_function", "gelu_new");
  f.unsupported(act != "gelu_new" && act != "gelu_pytorch_tanh", "activation_function",
                "an activation other than the tanh GeLU (gelu_new)");
  f.unsupported(f.has("n_inner") && f.integer("n_inner") != 4 * m.n_embd, "n_inner", "an MLP width other than 4 n_embd");
  f.unsupported(!f.boolean_or("tie_word_embeddings", true), "tie_word_embeddings", "an untied GPT-2 LM head");
  f.unsupported(!f.boolean_or("scale_attn_weights", true), "scale_attn_weights", "unscaled attention scores");
  f.unsupported(f.boolean_or("scale_attn_by_inverse_layer_idx", false), "scale_attn_by_inverse_layer_idx",
                "scores scaled by the layer index");
  read_variants(f, m);
}

// RoPE's base from rope_theta or transformers 5's rope_parameters; scaling variants are refused.
float read_rope_theta(const ConfigFields& f) {
  double theta = f.number_or("rope_theta", 10000.0);
  if (f.has("rope_parameters")) {
    const json& p = f.j["rope_parameters"];
    MS_CHECK(p.is_object(), "{}: field 'rope_parameters' is not an object", f.path);
    const std::string type = p.value("rope_type", std::string("default"));
    MS_CHECK(type == "default", "{}: field 'rope_parameters' has rope_type '{}': RoPE scaling variants are not "
             "implemented (only 'default')", f.path, type);
    if (p.contains("rope_theta")) theta = p["rope_theta"].get<double>();
  }
  if (f.has("rope_scaling")) {
    const json& s = f.j["rope_scaling"];
    const std::string type = s.is_object() ? s.value("rope_type", s.value("type", std::string("?"))) : "?";
    f.unsupported(type != "default", "rope_scaling", "RoPE scaling '" + type + "'");
  }
  return static_cast<float>(theta);
}

void read_llama_family(const ConfigFields& f, const std::string& arch, ModelConfig& m) {
  m.n_embd = f.integer("hidden_size");
  m.n_layer = f.integer("num_hidden_layers");
  m.n_head = f.integer("num_attention_heads");
  m.n_kv_head = f.integer_or("num_key_value_heads", m.n_head);
  m.ffn_hidden = f.integer("intermediate_size");
  m.max_seq_len = f.integer("max_position_embeddings");
  m.norm = NormKind::kRmsNorm;
  m.norm_eps = static_cast<float>(f.number_or("rms_norm_eps", 1e-6));
  m.positions = PositionKind::kRope;
  m.rope_theta = read_rope_theta(f);
  m.mlp = MlpKind::kSwiglu;
  m.tie_embeddings = f.boolean_or("tie_word_embeddings", false);
  m.block = BlockKind::kSequential;
  m.attention = AttentionKind::kFull;
  m.full_every = 0;
  f.unsupported(f.has("head_dim") && f.integer("head_dim") != m.n_embd / m.n_head, "head_dim",
                "a head size other than hidden_size / num_attention_heads");
  f.unsupported(f.integer_or("pretraining_tp", 1) != 1, "pretraining_tp", "a tensor-parallel pretraining split");
  f.unsupported(f.number_or("attention_dropout", 0.0) != 0.0, "attention_dropout", "attention dropout");
  if (arch != "MegascaleForCausalLM")
    f.unsupported(f.text_or("hidden_act", "silu") != "silu", "hidden_act", "an activation other than silu");
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM") {
    const bool attn_bias = f.boolean_or("attention_bias", false), mlp_bias = f.boolean_or("mlp_bias", false);
    f.unsupported(attn_bias != mlp_bias, attn_bias ? "attention_bias" : "mlp_bias",
                  "biases on the attention or the MLP projections alone");
    m.bias = attn_bias ? BiasKind::kAll : BiasKind::kNone;
  }
  if (arch == "MistralForCausalLM" && f.has("sliding_window")) {
    m.attention = AttentionKind::kSliding;
    m.window = f.integer("sliding_window");
  }
  if (arch == "Qwen2ForCausalLM") {
    m.bias = BiasKind::kQkv;
    f.unsupported(f.boolean_or("use_sliding_window", false), "use_sliding_window",
                  "Qwen2's sliding window on the layers from max_window_layers");
  }
  if (arch == "MegascaleForCausalLM") {
    m.norm = f.choice_or("megascale_norm", NormKind::kRmsNorm);
    m.positions = f.choice_or("megascale_positions", PositionKind::kRope);
    m.mlp = f.choice_or("megascale_mlp", MlpKind::kSwiglu);
    m.bias = f.choice_or("megascale_bias", BiasKind::kNone);
    read_variants(f, m);
  }
}

const std::set<std::string> kArchitectures = {"GPT2LMHeadModel", "LlamaForCausalLM", "MistralForCausalLM",
                                              "Qwen2ForCausalLM", "MegascaleForCausalLM"};

}  // namespace

ModelConfig hf_model_config(const std::string& dir, const ModelConfig& base) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const json j = read_json(path);
  MS_CHECK(j.is_object(), "{}: not a JSON object", path);
  const ConfigFields f{j, path};
  MS_CHECK(f.has("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1 &&
               j["architectures"][0].is_string(),
           "{}: field 'architectures' must list one class", path);
  const std::string arch = j["architectures"][0].get<std::string>();
  MS_CHECK(kArchitectures.count(arch), "{}: architecture '{}' is not implemented; megascale reads {}", path, arch,
           fmt::join(kArchitectures, ", "));
  ModelConfig m = base;
  m.vocab_size = f.integer("vocab_size");
  if (arch == "GPT2LMHeadModel") read_gpt2(f, m);
  else read_llama_family(f, arch, m);
  try {
    m.validate();
  } catch (const std::exception& e) {
    MS_FAIL("{}: the model it describes is not valid here: {}", path, e.what());
  }
  return m;
}

// ---- tensors ----

struct HfWeights::Impl {
  std::string dir;
  ModelConfig cfg;
  std::vector<std::unique_ptr<StMapped>> files;
  std::map<std::string, std::pair<const StMapped*, const StMappedTensor*>> tensors;  // HF name -> tensor
  std::string prefix;  // GPT-2 folders without the "transformer." prefix (GPT2Model's names): that prefix
  ParamLayout layout;

  std::string hf_name(const ParamSpec& s) const {
    return prefix.empty() ? s.name : s.name.substr(prefix.size());
  }
  // The file that holds (or, for a missing tensor of a one-file folder, should hold) a tensor.
  std::string where(const std::string& name) const {
    auto it = tensors.find(name);
    if (it != tensors.end()) return it->second.first->file().path();
    return files.size() == 1 ? files[0]->file().path() : dir;
  }
  // The shape the folder stores for s.
  std::vector<int64_t> stored_shape(const ParamSpec& s) const {
    std::vector<int64_t> want(s.full_shape.begin(), s.full_shape.end());
    if (hf_transposed(cfg, s)) std::swap(want[0], want[1]);
    if (s.offset == layout.wte || s.offset == layout.head) want[0] = cfg.vocab_size;
    return want;
  }
  void open(const std::string& d);
  void check();
};

void HfWeights::Impl::open(const std::string& d) {
  dir = d;
  const fs::path single = fs::path(d) / "model.safetensors", index = fs::path(d) / "model.safetensors.index.json";
  if (!fs::exists(single) && fs::exists(index)) {  // sharded: every file of the weight map
    const json j = read_json(index.string());
    MS_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
             "{}: field 'weight_map' is missing or not an object", index.string());
    std::map<std::string, const StMapped*> by_file;
    for (const auto& [name, file] : j["weight_map"].items()) {
      MS_CHECK(file.is_string(), "{}: weight_map['{}'] is not a file name", index.string(), name);
      const std::string f = file.get<std::string>();
      MS_CHECK(f.find('/') == std::string::npos, "{}: weight_map['{}'] = '{}' is not a file of the folder",
               index.string(), name, f);
      if (!by_file.count(f)) {
        files.push_back(std::make_unique<StMapped>((fs::path(d) / f).string()));
        by_file[f] = files.back().get();
      }
      const StMapped& m = *by_file[f];
      auto it = m.tensors().find(name);
      MS_CHECK(it != m.tensors().end(), "{}: weight_map puts tensor '{}' in {}, which does not hold it",
               index.string(), name, m.file().path());
      tensors[name] = {&m, &it->second};
    }
    for (const auto& [f, m] : by_file)
      for (const auto& [name, t] : m->tensors())
        MS_CHECK(tensors.count(name) && tensors[name].first == m, "{}: tensor '{}' is not in {}'s weight_map",
                 m->file().path(), name, index.string());
    return;
  }
  files.push_back(std::make_unique<StMapped>(single.string()));  // names the file when absent or malformed
  for (const auto& [name, t] : files.back()->tensors()) tensors[name] = {files.back().get(), &t};
}

void HfWeights::Impl::check() {
  layout = build_param_layout(cfg);
  if (gpt2_names(cfg) && !tensors.count("transformer.wte.weight") && tensors.count("wte.weight"))
    prefix = "transformer.";
  std::set<std::string> expected;
  for (const ParamSpec& s : layout.specs) {
    const std::string name = hf_name(s);
    expected.insert(name);
    auto it = tensors.find(name);
    MS_CHECK(it != tensors.end(), "{}: missing tensor '{}'", where(name), name);
    const StMappedTensor& t = *it->second.second;
    MS_CHECK(t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16,
             "{}: tensor '{}' has dtype {}, expected F32, F16 or BF16", where(name), name, safetensors_dtype(t.dtype));
    const std::vector<int64_t> want = stored_shape(s);
    MS_CHECK(t.shape == want, "{}: tensor '{}' has shape [{}], expected [{}]{}", where(name), name,
             fmt::join(t.shape, ","), fmt::join(want, ","),
             s.offset == layout.wte || s.offset == layout.head ? " (rows: config.json's vocab_size)" : "");
  }
  const std::string tied_head = "lm_head.weight";
  for (const auto& [name, entry] : tensors) {
    if (expected.count(name)) continue;
    const bool mask = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");  // GPT-2's buffers
    if ((gpt2_names(cfg) && mask) || name.ends_with("rotary_emb.inv_freq")) continue;
    if (name == tied_head && cfg.tie_embeddings) continue;  // checked against the embedding below
    MS_FAIL("{}: tensor '{}' of the checkpoint is not part of the model ({} architecture{})", where(name), name,
            gpt2_names(cfg) ? "GPT-2" : "Llama-style", prefix.empty() ? "" : ", names without 'transformer.'");
  }
  if (cfg.tie_embeddings && tensors.count(tied_head)) {  // stored anyway: must be the embedding itself
    const StMappedTensor& h = *tensors[tied_head].second;
    const StMappedTensor& e = *tensors[hf_name(layout.specs[0])].second;
    MS_CHECK(h.shape == e.shape && to_f32(h.dtype, h.data, h.bytes / dtype_size(h.dtype)) ==
                                       to_f32(e.dtype, e.data, e.bytes / dtype_size(e.dtype)),
             "{}: tensor '{}' differs from the token embedding, but the model ties them (tie_word_embeddings)",
             where(tied_head), tied_head);
  }
}

HfWeights::HfWeights(const std::string& dir, const ModelConfig& cfg) : impl_(std::make_unique<Impl>()) {
  impl_->cfg = cfg;
  impl_->open(dir);
  impl_->check();
}
HfWeights::~HfWeights() = default;
HfWeights::HfWeights(HfWeights&&) noexcept = default;

std::vector<float> HfWeights::read(const ParamSpec& s) const {
  const Impl& m = *impl_;
  const std::string name = m.hf_name(s);
  auto it = m.tensors.find(name);
  MS_CHECK(it != m.tensors.end(), "{}: missing tensor '{}'", m.dir, name);
  const StMappedTensor& t = *it->second.second;
  const std::vector<float> src = to_f32(t.dtype, t.data, t.bytes / dtype_size(t.dtype));
  for (size_t i = 0; i < src.size(); i++)
    MS_CHECK(std::isfinite(src[i]), "{}: tensor '{}' holds a non-finite value at {}", m.where(name), name, i);
  std::vector<float> full(s.full_numel(), 0.0f);  // padded vocabulary rows stay zero
  if (hf_transposed(m.cfg, s)) {
    const size_t O = s.full_shape[0], I = s.full_shape[1];
    for (size_t o = 0; o < O; o++)
      for (size_t i = 0; i < I; i++) full[o * I + i] = src[i * O + o];
  } else {
    std::copy(src.begin(), src.end(), full.begin());
  }
  return full;
}

namespace {

// The fields of two model sections that decide the function the weights compute, where they differ.
std::string model_difference(const ModelConfig& folder, const ModelConfig& model) {
  std::string out;
  auto cmp = [&](const char* key, const std::string& a, const std::string& b) {
    if (a != b) out += fmt::format("{}model.{} = {} in the folder, {} in the model", out.empty() ? "" : "; ", key, a, b);
  };
  auto num = [](auto v) { return fmt::format("{}", v); };
  cmp("vocab_size", num(folder.vocab_size), num(model.vocab_size));
  cmp("n_layer", num(folder.n_layer), num(model.n_layer));
  cmp("n_embd", num(folder.n_embd), num(model.n_embd));
  cmp("n_head", num(folder.n_head), num(model.n_head));
  cmp("n_kv_head", num(folder.kv_heads()), num(model.kv_heads()));
  cmp("ffn_hidden", num(folder.ffn()), num(model.ffn()));
  cmp("norm", config_name(folder.norm), config_name(model.norm));
  cmp("norm_eps", num(folder.norm_eps), num(model.norm_eps));
  cmp("positions", config_name(folder.positions), config_name(model.positions));
  if (folder.rope()) cmp("rope_theta", num(folder.rope_theta), num(model.rope_theta));
  else cmp("max_seq_len", num(folder.max_seq_len), num(model.max_seq_len));
  cmp("mlp", config_name(folder.mlp), config_name(model.mlp));
  cmp("tie_embeddings", num(folder.tie_embeddings), num(model.tie_embeddings));
  cmp("bias", config_name(folder.bias), config_name(model.bias));
  cmp("block", config_name(folder.block), config_name(model.block));
  cmp("attention", config_name(folder.attention), config_name(model.attention));
  if (folder.attention == AttentionKind::kSliding) {
    cmp("window", num(folder.window), num(model.window));
    cmp("full_every", num(folder.full_every), num(model.full_every));
  }
  return out;
}

}  // namespace

void import_hf(GPT& model, const std::string& dir) {
  const ModelConfig& cfg = model.config();
  HfWeights w(dir, cfg);  // names, shapes and dtypes against this model first
  const std::string diff = model_difference(hf_model_config(dir, cfg), cfg);
  MS_CHECK(diff.empty(), "{}/config.json describes another model than this one: {}", dir, diff);
  // Every tensor read and checked (finite) into host memory first: a failure writes nothing.
  const ModelShard& shard = model.shard();
  std::vector<float> host(model.num_params());
  for (const ParamSpec& s : model.param_specs()) {
    const std::vector<float> full = w.read(s);
    slice_param(s, shard.parts, shard.index, full.data(), host.data() + s.offset);
  }
  model.load_params(host.data());
}

}  // namespace ms
