// test_hf_import: Hugging Face folders in and out, against PyTorch. Folders written by PyTorch
// (tests/py/make_hf_folder.py: save_pretrained's layout, weights drawn by torch) in F32, F16 and
// BF16, single-file and sharded, as LlamaForCausalLM (grouped-query attention, untied head),
// MistralForCausalLM (sliding window), Qwen2ForCausalLM (q/k/v biases, tied) and GPT2LMHeadModel
// (with "transformer." names and with the hub's GPT2Model names plus mask buffers):
//  - are imported and give PyTorch's loss on the same batch (tests/py/torch_llama.py, torch_gpt.py,
//    float64): 1e-5 relative (every F16/BF16 value is exact in fp32, so the tolerance is fp32's);
//  - train (5 AdamW steps, the loss falls), are exported, and PyTorch loads the export with the
//    trained weights bit for bit and computes our loss on them (1e-5).
// Every mismatch is a named error before any parameter is written (the file, the tensor or field).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/rng.h"
#include "base/safetensors.h"
#include "common/test_util.h"
#include "model/hf_export.h"
#include "model/hf_import.h"
#include "train/trainer.h"

namespace ms {
namespace {
namespace fs = std::filesystem;

struct Folder {
  std::string kind, dtype;
  int shards;
  bool tied = false;
};
void PrintTo(const Folder& f, std::ostream* os) { *os << f.kind << "_" << f.dtype << "_" << f.shards; }

constexpr int kV = 91, kC = 32, kL = 2, kT = 12, kB = 2;

std::string shape_json(const Folder& f) {
  return nlohmann::json{{"vocab", kV}, {"hidden", kC}, {"layers", kL}, {"heads", 4}, {"kv_heads", 2}, {"ffn", 48},
                        {"positions", 16}, {"tied", f.tied}, {"theta", 500.0}, {"window", 5}}.dump();
}

void make_folder(const Folder& f, const std::string& dir) {
  const auto r = testing::run_cmd(fmt::format("{} {}/tests/py/make_hf_folder.py {} {} {} {} '{}'", testing::torch_python(),
                                              MEGASCALE_SOURCE_DIR, f.kind, f.dtype, f.shards, dir, shape_json(f)));
  ASSERT_EQ(r.code, 0) << r.output;
}

// Batches (S, B, T) of learnable token pairs, as safetensors for the Python side.
struct Batches {
  std::vector<int32_t> inputs, targets;
  Batches(int S) : inputs(static_cast<size_t>(S) * kB * kT), targets(inputs.size()) {
    Rng rng(11, 3);
    for (size_t i = 0; i < inputs.size(); i++) {
      inputs[i] = static_cast<int32_t>(rng.next_u64() % kV);
      targets[i] = (5 * inputs[i] + 2) % kV;
    }
  }
  void save(const std::string& path, int S) const {
    StFile b;
    b.tensors["inputs"] = st_i32({S, kB, kT}, inputs.data());
    b.tensors["targets"] = st_i32({S, kB, kT}, targets.data());
    save_safetensors(path, b);
  }
};

// PyTorch's loss of batch 0 on a folder, and the tensors it loaded.
StFile torch_loss(const std::string& kind, const std::string& dir, const std::string& batch) {
  const std::string out = dir + ".torch.safetensors";
  const std::string cmd = kind.starts_with("gpt2")
                              ? fmt::format("{} {}/tests/py/torch_gpt.py --loss {} {} {}", testing::torch_python(),
                                            MEGASCALE_SOURCE_DIR, dir, batch, out)
                              : fmt::format("{} {}/tests/py/torch_llama.py loss {} {} {}", testing::torch_python(),
                                            MEGASCALE_SOURCE_DIR, dir, batch, out);
  const auto r = testing::run_cmd(cmd);
  EXPECT_EQ(r.code, 0) << r.output;
  return load_safetensors(out);
}

Config run_config(const std::string& dir) {
  Config c;
  c.model.pad_vocab_to = 64;
  c.model = hf_model_config(dir, c.model);
  c.optim.lr = 3e-3f;
  c.optim.min_lr = 3e-3f;
  c.optim.warmup_steps = 0;
  c.data.train = "unused";
  c.train.batch_size = kB;
  c.train.seq_len = kT;
  c.train.steps = 5;
  c.validate();
  return c;
}

class HfImport : public ::testing::TestWithParam<Folder> {};

TEST_P(HfImport, PyTorchFolderImportsTrainsAndExportsBitForBit) {
  const Folder f = GetParam();
  const std::string tmp = testing::make_temp_dir("hf_import"), src = tmp + "/src", out = tmp + "/out";
  make_folder(f, src);
  const int S = 6;
  Batches batches(S);
  batches.save(tmp + "/batch.safetensors", S);

  // The imported model computes PyTorch's loss on the folder's weights.
  const Config cfg = run_config(src);
  Trainer trainer(cfg);
  GPT& model = trainer.model();
  trainer.parallel().import_hf_now(src);  // the weights, then a fresh optimizer state from them
  const float loss = model.forward(batches.inputs.data(), batches.targets.data(), kB, kT);
  const double ref = torch_loss(f.kind, src, tmp + "/batch.safetensors").at("loss").to_f64()[0];
  EXPECT_NEAR(loss, ref, 1e-5 * ref) << "imported loss";

  // The optimizer trains it; the export holds the trained weights.
  std::vector<float> losses;
  int s = 0;
  for (int step = 0; step < 5; step++) {
    losses.push_back(trainer.train_step([&](int* in, int* tg) {
      std::copy_n(batches.inputs.data() + static_cast<size_t>(s % S) * kB * kT, kB * kT, in);
      std::copy_n(batches.targets.data() + static_cast<size_t>(s % S) * kB * kT, kB * kT, tg);
      s++;
    }).loss);
  }
  EXPECT_LT(losses.back(), losses.front()) << "training from the imported weights should lower the loss";
  export_hf(model, out);
  const float trained = model.forward(batches.inputs.data(), batches.targets.data(), kB, kT);
  const StFile back = torch_loss(f.kind.starts_with("gpt2") ? "gpt2" : f.kind, out, tmp + "/batch.safetensors");
  EXPECT_NEAR(trained, back.at("loss").to_f64()[0], 1e-5 * trained) << "PyTorch on the export";
  // Bit for bit: every tensor PyTorch loaded is our parameter (HF layout).
  const StFile ours = load_safetensors(out + "/model.safetensors");
  int compared = 0;
  for (const auto& [name, t] : ours.tensors) {
    const StTensor& theirs = back.at("w." + name);
    ASSERT_EQ(t.bytes.size(), theirs.bytes.size()) << name;
    EXPECT_EQ(0, std::memcmp(t.bytes.data(), theirs.bytes.data(), t.bytes.size())) << name;
    compared++;
  }
  EXPECT_EQ(compared, static_cast<int>(back.tensors.size()) - 1);
  // And megascale reads its own export back to the same parameters.
  GPT again(cfg.model, kB, kT);
  import_hf(again, out);
  EXPECT_EQ(0, std::memcmp(static_cast<const GPT&>(model).params(), static_cast<const GPT&>(again).params(),
                           model.num_params() * sizeof(float)));
  const auto arch = nlohmann::json::parse(testing::slurp(out + "/config.json"))["architectures"][0];
  const auto want = nlohmann::json::parse(testing::slurp(src + "/config.json"))["architectures"][0];
  EXPECT_EQ(arch, want) << "the export names the class it came from";
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(Folders, HfImport,
                         ::testing::Values(Folder{"llama", "F32", 1}, Folder{"llama", "BF16", 3},
                                           Folder{"llama", "F16", 2}, Folder{"mistral", "F32", 1},
                                           Folder{"qwen2", "BF16", 1, true}, Folder{"gpt2", "F32", 1},
                                           Folder{"gpt2", "F16", 2}),
                         [](const auto& info) {
                           return info.param.kind + "_" + info.param.dtype + "_" + std::to_string(info.param.shards);
                         });

// The hub's GPT-2 names (no "transformer." prefix) and mask buffers read as the prefixed folder.
TEST(HfImportNames, HubGpt2NamesAndMaskBuffers) {
  const std::string tmp = testing::make_temp_dir("hf_hub");
  make_folder(Folder{"gpt2", "F32", 1}, tmp + "/pre");
  make_folder(Folder{"gpt2-hub", "F32", 1}, tmp + "/hub");
  const Config cfg = run_config(tmp + "/hub");
  GPT a(cfg.model, kB, kT), b(cfg.model, kB, kT);
  import_hf(a, tmp + "/pre");
  import_hf(b, tmp + "/hub");
  const GPT &ca = a, &cb = b;
  EXPECT_EQ(0, std::memcmp(ca.params(), cb.params(), a.num_params() * sizeof(float)));
  fs::remove_all(tmp);
}

// Edits config.json of a copy of `src` (a llama folder) and expects every message part.
class HfImportErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = testing::make_temp_dir("hf_errors");
    make_folder(Folder{"llama", "F32", 1}, tmp_ + "/good");
    make_folder(Folder{"llama", "F32", 2}, tmp_ + "/sharded");
  }
  void TearDown() override { fs::remove_all(tmp_); }
  std::string copy(const std::string& name, const std::string& from = "good") {
    fs::copy(tmp_ + "/" + from, tmp_ + "/" + name, fs::copy_options::recursive);
    return tmp_ + "/" + name;
  }
  static void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
    auto j = nlohmann::json::parse(testing::slurp(dir + "/config.json"));
    edit(j);
    std::ofstream(dir + "/config.json") << j.dump(2);
  }
  static void edit_tensors(const std::string& dir, const std::function<void(StFile&)>& edit) {
    StFile f = load_safetensors(dir + "/model.safetensors");
    edit(f);
    save_safetensors(dir + "/model.safetensors", f);
  }
  // The config (named errors) and the model import (named errors) of a folder.
  static void expect_config_error(const std::string& dir, std::vector<std::string> parts) {
    testing::expect_error([&] { hf_model_config(dir, ModelConfig{}); }, parts);
  }
  static void expect_import_error(const std::string& dir, const std::string& cfg_dir, std::vector<std::string> parts) {
    const Config cfg = run_config(cfg_dir);
    GPT m(cfg.model, kB, kT);
    std::vector<float> before(m.num_params());
    m.copy_params_to_host(before.data());
    testing::expect_error([&] { import_hf(m, dir); }, parts);
    const GPT& c = m;
    EXPECT_EQ(0, std::memcmp(before.data(), c.params(), before.size() * sizeof(float))) << "a failed import wrote";
  }
  std::string tmp_;
};

TEST_F(HfImportErrors, ConfigFieldsMegascaleDoesNotImplementAreNamed) {
  std::string d = copy("scaling");
  edit_config(d, [](auto& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; });
  expect_config_error(d, {d + "/config.json", "rope_scaling", "RoPE scaling 'llama3'"});
  d = copy("act");
  edit_config(d, [](auto& j) { j["hidden_act"] = "gelu"; });
  expect_config_error(d, {"hidden_act", "silu"});
  d = copy("headdim");
  edit_config(d, [](auto& j) { j["head_dim"] = 16; });
  expect_config_error(d, {"head_dim", "hidden_size / num_attention_heads"});
  d = copy("bias");
  edit_config(d, [](auto& j) { j["attention_bias"] = true; });
  expect_config_error(d, {"attention_bias", "alone"});
  d = copy("arch");
  edit_config(d, [](auto& j) { j["architectures"] = {"GemmaForCausalLM"}; });
  expect_config_error(d, {"GemmaForCausalLM", "is not implemented"});
  d = copy("kv");
  edit_config(d, [](auto& j) { j["num_key_value_heads"] = 3; });
  expect_config_error(d, {"model.n_kv_head=3 must divide model.n_head=4"});
  d = copy("qwen_window");
  edit_config(d, [](auto& j) { j["architectures"] = {"Qwen2ForCausalLM"}; j["use_sliding_window"] = true; });
  expect_config_error(d, {"use_sliding_window"});
  d = copy("noconfig");
  fs::remove(d + "/config.json");
  expect_config_error(d, {d + "/config.json", "cannot be opened"});
}

TEST_F(HfImportErrors, TensorMismatchesAreNamedAndNothingIsWritten) {
  const std::string good = tmp_ + "/good";
  std::string d = copy("missing");
  edit_tensors(d, [](StFile& f) { f.tensors.erase("model.layers.1.mlp.up_proj.weight"); });
  expect_import_error(d, good, {d + "/model.safetensors", "missing tensor 'model.layers.1.mlp.up_proj.weight'"});
  d = copy("extra");
  edit_tensors(d, [](StFile& f) { f.tensors["model.layers.0.self_attn.o_proj.bias"] = f.tensors.at("model.norm.weight"); });
  expect_import_error(d, good, {"tensor 'model.layers.0.self_attn.o_proj.bias' of the checkpoint is not part of the model"});
  d = copy("shape");
  edit_tensors(d, [](StFile& f) {
    StTensor& t = f.tensors.at("model.layers.0.self_attn.k_proj.weight");
    std::swap(t.shape[0], t.shape[1]);
  });
  expect_import_error(d, good, {"'model.layers.0.self_attn.k_proj.weight' has shape [32,16], expected [16,32]"});
  d = copy("dtype");
  edit_tensors(d, [](StFile& f) {
    StTensor& t = f.tensors.at("model.norm.weight");
    std::vector<int32_t> ints(t.numel(), 1);
    t = st_i32(t.shape, ints.data());
  });
  expect_import_error(d, good, {"'model.norm.weight' has dtype I32, expected F32, F16 or BF16"});
  d = copy("vocab");
  edit_config(d, [](auto& j) { j["vocab_size"] = 95; });
  expect_import_error(d, d, {"'model.embed_tokens.weight' has shape [91,32], expected [95,32]", "vocab_size"});
  d = copy("nan");
  edit_tensors(d, [](StFile& f) {
    StTensor& t = f.tensors.at("lm_head.weight");
    const float inf = std::numeric_limits<float>::infinity();
    std::memcpy(t.bytes.data() + 5 * sizeof(float), &inf, sizeof(float));
  });
  expect_import_error(d, good, {"'lm_head.weight' holds a non-finite value at 5"});
  // Another model's config: the differing fields named.
  d = copy("theta");
  edit_config(d, [](auto& j) { j["rope_theta"] = 10000.0; });
  expect_import_error(d, good, {d + "/config.json describes another model", "model.rope_theta = 10000 in the folder, 500"});
  // A sharded index that puts a tensor in a file without it.
  d = copy("badindex", "sharded");
  auto index = nlohmann::json::parse(testing::slurp(d + "/model.safetensors.index.json"));
  const std::string moved = "model.norm.weight";
  index["weight_map"][moved] = index["weight_map"][moved] == "model-00001-of-00002.safetensors"
                                   ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  std::ofstream(d + "/model.safetensors.index.json") << index.dump();
  expect_import_error(d, good, {"weight_map puts tensor '" + moved + "'", "which does not hold it"});
}

}  // namespace
}  // namespace ms
