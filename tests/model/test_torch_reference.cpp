// The whole model against an independent PyTorch implementation (tests/py/torch_gpt.py, float64),
// on tiny configs of every variant: sequential/parallel block x full/sliding attention (and
// sliding with full_every). The C++ model is exported as Hugging Face safetensors, loaded by the
// Python side, and both compute: logits, loss and every parameter gradient on one batch, then the
// losses of 10 AdamW steps (with weight decay groups and global-norm clipping).
// Tolerances (fp32 C++ vs float64 PyTorch): logits and loss 1e-5 relative (inf-norm); every
// gradient tensor 1e-5 relative L2; the 10 step losses 1e-5 relative (measured: ~5e-7, ~5e-7, ~1e-7).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "model/hf_export.h"
#include "base/rng.h"
#include "base/safetensors.h"
#include "common/test_util.h"
#include "common/torch_oracle.h"
#include "train/trainer.h"

namespace ms {
namespace {

struct Variant {
  std::string name, block, attention;
  int window, full_every;
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

Config tiny_config(const Variant& v) {
  Config c;
  c.model.vocab_size = 91;  // padded to 128: exercises the padded-vocabulary path
  c.model.pad_vocab_to = 64;
  c.model.n_layer = 3;
  c.model.n_head = 4;
  c.model.n_embd = 32;
  c.model.max_seq_len = 16;
  c.model.block = *ms::parse_config_enum<ms::BlockKind>(v.block);
  c.model.attention = *ms::parse_config_enum<ms::AttentionKind>(v.attention);
  c.model.window = v.window;
  c.model.full_every = v.full_every;
  c.model.init_std = 0.1f;  // larger than GPT-2's so every path carries signal
  c.optim.name = ms::OptimizerKind::kAdamW;
  c.optim.lr = 3e-3f;
  c.optim.min_lr = 3e-3f;  // constant learning rate
  c.optim.warmup_steps = 0;
  c.optim.weight_decay = 0.1f;
  c.optim.grad_clip = 1.0f;
  c.data.train = "unused";
  c.train.batch_size = 3;
  c.train.seq_len = 12;
  c.train.steps = 10;
  c.train.seed = 42;
  c.validate();
  return c;
}

class TorchReference : public ::testing::TestWithParam<Variant> {};

TEST_P(TorchReference, LogitsLossGradsAndAdamWSteps) {
  const Variant v = GetParam();
  Config cfg = tiny_config(v);
  const int S = 10, B = cfg.train.batch_size, T = cfg.train.seq_len, V = cfg.model.vocab_size;
  const int Vp = cfg.model.padded_vocab(), C = cfg.model.n_embd;
  Trainer trainer(cfg);
  GPT& model = trainer.model();

  std::string dir = testing::make_temp_dir("torchref_" + v.name);
  export_hf(model, dir + "/model");
  const testing::OracleBatches batches(S, B, T, V);
  batches.write(dir, cfg.optim);
  const std::vector<int32_t>& inputs = batches.inputs;
  const std::vector<int32_t>& targets = batches.targets;
  auto r = testing::run_cmd(fmt::format("{} {}/tests/py/torch_gpt.py {}/model {}/batch.safetensors {}/hyper.json {}/ref.safetensors",
                                        testing::torch_python(), MEGASCALE_SOURCE_DIR, dir, dir, dir, dir));
  ASSERT_EQ(r.code, 0) << r.output;
  StFile ref = load_safetensors(dir + "/ref.safetensors");

  // Logits of batch 0 (real vocabulary columns only).
  const double logit_err = batches.logits_error(model, ref, V);
  EXPECT_LT(logit_err, 1e-5) << "logits";

  // Loss and every gradient.
  model.zero_grad();
  float loss = model.forward(inputs.data(), targets.data(), B, T, 1.0f / (B * T));
  model.backward();
  double ref_loss = ref.at("loss").to_f64()[0];
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss)) << "loss";
  int checked = 0;
  double worst_grad = 0;
  for (const ParamSpec& s : model.param_specs()) {
    const float* g = model.grads() + s.offset;
    std::vector<double> want = ref.at("grad." + s.name).to_f64(), got;
    if (s.kind == ParamKind::kWeight) {  // ours (out, in) vs HF Conv1D (in, out)
      int O = s.shape[0], I = s.shape[1];
      got.resize(want.size());
      for (int o = 0; o < O; o++)
        for (int i = 0; i < I; i++) got[static_cast<size_t>(i) * O + o] = g[static_cast<size_t>(o) * I + i];
    } else if (s.name == "transformer.wte.weight") {
      got.assign(g, g + static_cast<size_t>(V) * C);
      for (size_t i = static_cast<size_t>(V) * C; i < static_cast<size_t>(Vp) * C; i++)
        ASSERT_EQ(g[i], 0.0f) << "padded vocabulary row got a gradient";
    } else {
      got.assign(g, g + s.numel());
    }
    ASSERT_EQ(got.size(), want.size()) << s.name;
    double err = testing::rel_l2(got, want);
    worst_grad = std::max(worst_grad, err);
    EXPECT_LT(err, 1e-5) << "gradient of " << s.name;
    checked++;
  }
  EXPECT_EQ(checked, static_cast<int>(ref.tensors.size()) - 3);  // every reference gradient was compared

  // 10 AdamW steps from the same initial weights (re-initialised: the checks above changed nothing
  // but the gradients).
  model.init_weights(static_cast<uint64_t>(cfg.train.seed));
  const double worst_step = batches.expect_steps_follow(trainer, ref.at("losses").to_f64(), 1e-5);
  std::cout << v.name << ": logits rel err " << logit_err << ", worst gradient rel L2 err " << worst_grad
            << ", worst step-loss rel err " << worst_step << "\n";
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, TorchReference,
    ::testing::Values(Variant{"seq_full", "sequential", "full", 0, 0},
                      Variant{"par_full", "parallel", "full", 0, 0},
                      Variant{"seq_sliding", "sequential", "sliding", 4, 0},
                      Variant{"par_sliding", "parallel", "sliding", 4, 0},
                      Variant{"seq_sliding_full_every2", "sequential", "sliding", 3, 2},
                      Variant{"par_sliding_full_every3", "parallel", "sliding", 5, 3}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ms
