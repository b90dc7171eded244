// The Llama-style family against an independent PyTorch implementation (tests/py/torch_llama.py,
// float64, written from the published architecture): RMSNorm, RoPE, SwiGLU, grouped-query and
// multi-query attention, untied LM head, no biases or Qwen2's q/k/v biases, both blocks, both
// attentions, odd sequence lengths, and mixed combinations (LayerNorm with RoPE, RMSNorm with learned
// positions and a GeLU MLP, ...). The C++ model is exported as a Hugging Face folder, the Python
// side loads it and both compute logits, loss and every parameter gradient on one batch, then the
// losses of 10 AdamW steps (decay groups, global-norm clipping).
// Tolerances: fp32 (C++) against float64 (PyTorch): logits and loss 1e-5 relative (inf-norm), every
// gradient tensor 1e-5 relative L2, the 10 step losses 1e-5 relative. bf16 (every GEMM and the
// attention tiles on bf16 operands, fp32 accumulation) against float64: logits 2e-2 relative
// (inf-norm), loss 5e-3, gradients 6e-2 relative L2, step losses 1e-2 (measured on the two bf16
// variants below: logits 5.8e-3, gradients 1.2e-2, step losses 6.8e-4; fp32: logits 3.6e-7,
// gradients 7.5e-7, step losses 8.9e-8).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/rng.h"
#include "base/safetensors.h"
#include "common/test_util.h"
#include "common/torch_oracle.h"
#include "model/hf_export.h"
#include "train/trainer.h"

namespace ms {
namespace {

struct Variant {
  std::string name;
  std::function<void(ModelConfig&)> shape;  // applied after the llama preset
  int T = 12;
  DType precision = DType::kF32;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

Config llama_config(const Variant& v) {
  Config c;
  c.model.preset = ModelPreset::kLlama;
  c.model.apply_preset();
  c.model.vocab_size = 91;  // padded to 128: exercises the padded-vocabulary path
  c.model.pad_vocab_to = 64;
  c.model.n_layer = 3;
  c.model.n_head = 4;
  c.model.n_kv_head = 2;
  c.model.n_embd = 32;
  c.model.ffn_hidden = 40;
  c.model.max_seq_len = 16;
  c.model.rope_theta = 500.0f;  // short sequences still turn every channel pair noticeably
  c.model.norm_eps = 1e-5f;
  c.model.init_std = 0.1f;
  v.shape(c.model);
  c.optim.name = OptimizerKind::kAdamW;
  c.optim.lr = 3e-3f;
  c.optim.min_lr = 3e-3f;
  c.optim.warmup_steps = 0;
  c.optim.weight_decay = 0.1f;
  c.optim.grad_clip = 1.0f;
  c.data.train = "unused";
  c.train.batch_size = 3;
  c.train.seq_len = v.T;
  c.train.steps = 10;
  c.train.seed = 42;
  c.train.precision = v.precision;
  c.validate();
  return c;
}

struct Tolerance {
  double logits, loss, grad, step;
};
Tolerance tolerance(DType p) {
  if (p == DType::kBF16) return {2e-2, 5e-3, 6e-2, 1e-2};
  return {1e-5, 1e-5, 1e-5, 1e-5};
}

class TorchLlama : public ::testing::TestWithParam<Variant> {};

TEST_P(TorchLlama, LogitsLossGradsAndAdamWSteps) {
  const Variant v = GetParam();
  Config cfg = llama_config(v);
  const Tolerance tol = tolerance(v.precision);
  const int S = 10, B = cfg.train.batch_size, T = cfg.train.seq_len, V = cfg.model.vocab_size;
  Trainer trainer(cfg);
  GPT& model = trainer.model();
  ASSERT_FALSE(gpt2_names(cfg.model));

  std::string dir = testing::make_temp_dir("torchllama_" + v.name);
  export_hf(model, dir + "/model");
  const testing::OracleBatches batches(S, B, T, V);
  batches.write(dir, cfg.optim);
  const std::vector<int32_t>& inputs = batches.inputs;
  const std::vector<int32_t>& targets = batches.targets;
  auto r = testing::run_cmd(fmt::format("{} {}/tests/py/torch_llama.py ref {}/model {}/batch.safetensors {}/hyper.json "
                                        "{}/ref.safetensors", testing::torch_python(), MEGASCALE_SOURCE_DIR, dir, dir,
                                        dir, dir));
  ASSERT_EQ(r.code, 0) << r.output;
  StFile ref = load_safetensors(dir + "/ref.safetensors");

  // Logits of batch 0 (real vocabulary columns only).
  const double logit_err = batches.logits_error(model, ref, V);
  EXPECT_LT(logit_err, tol.logits) << "logits";

  // Loss and every gradient (our weights are nn.Linear (out, in), as Llama's: no transposes).
  model.zero_grad();
  const float loss = model.forward(inputs.data(), targets.data(), B, T, 1.0f / (B * T));
  model.backward();
  const double ref_loss = ref.at("loss").to_f64()[0];
  EXPECT_NEAR(loss, ref_loss, tol.loss * std::fabs(ref_loss)) << "loss";
  const ParamLayout lay = build_param_layout(cfg.model);
  int checked = 0;
  double worst_grad = 0;
  for (const ParamSpec& s : model.param_specs()) {
    const float* g = model.grads() + s.offset;
    const std::vector<double> want = ref.at("grad." + s.name).to_f64();
    const bool vocab = s.offset == lay.wte || s.offset == lay.head;
    std::vector<double> got(g, g + (vocab ? static_cast<size_t>(V) * s.shape[1] : s.numel()));
    if (vocab) {
      for (size_t i = got.size(); i < s.numel(); i++) ASSERT_EQ(g[i], 0.0f) << "padded vocabulary row got a gradient";
    }
    ASSERT_EQ(got.size(), want.size()) << s.name;
    const double err = testing::rel_l2(got, want);
    worst_grad = std::max(worst_grad, err);
    EXPECT_LT(err, tol.grad) << "gradient of " << s.name;
    checked++;
  }
  EXPECT_EQ(checked, static_cast<int>(ref.tensors.size()) - 3);  // every reference gradient was compared

  // 10 AdamW steps from the same initial weights.
  model.init_weights(static_cast<uint64_t>(cfg.train.seed));
  const double worst_step = batches.expect_steps_follow(trainer, ref.at("losses").to_f64(), tol.step);
  std::cout << v.name << ": logits rel err " << logit_err << ", worst gradient rel L2 err " << worst_grad
            << ", worst step-loss rel err " << worst_step << "\n";
  std::filesystem::remove_all(dir);
}

void mha(ModelConfig& m) { m.n_kv_head = 0; }
void mqa(ModelConfig& m) { m.n_kv_head = 1; }
void gqa(ModelConfig& m) { m.n_kv_head = 2; }

INSTANTIATE_TEST_SUITE_P(
    Variants, TorchLlama,
    ::testing::Values(
        Variant{"llama_mha", mha},
        Variant{"llama_gqa", gqa},
        Variant{"llama_mqa", mqa},
        Variant{"llama_gqa_odd_T", gqa, 11},
        Variant{"llama_gqa_parallel", [](ModelConfig& m) { gqa(m); m.block = BlockKind::kParallel; }},
        Variant{"llama_mqa_sliding", [](ModelConfig& m) {
                  mqa(m); m.attention = AttentionKind::kSliding; m.window = 4; m.full_every = 2; }, 13},
        Variant{"llama_tied_qkv_bias", [](ModelConfig& m) {  // Qwen2's layout, tied like Qwen2-0.5B
                  m.tie_embeddings = true; m.bias = BiasKind::kQkv; }},
        Variant{"layernorm_rope_gelu_bias", [](ModelConfig& m) {
                  m.norm = NormKind::kLayerNorm; m.mlp = MlpKind::kGelu; m.bias = BiasKind::kAll; }},
        Variant{"rmsnorm_learned_swiglu_parallel", [](ModelConfig& m) {
                  m.positions = PositionKind::kLearned; m.block = BlockKind::kParallel; mqa(m); }, 9},
        Variant{"llama_gqa_bf16", gqa, 12, DType::kBF16},
        Variant{"llama_mqa_parallel_bf16", [](ModelConfig& m) { mqa(m); m.block = BlockKind::kParallel; }, 11,
                DType::kBF16}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ms
