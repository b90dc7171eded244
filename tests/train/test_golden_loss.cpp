// test_golden_loss: the per-step training loss of one fixed small run (fp32, one process, 12 AdamW
// steps on a fixed synthetic token stream) equals the committed trace tests/train/golden_loss.txt
// EXACTLY (every value printed with "%.9g", which round-trips a float). Any change of numerics
// (a kernel's summation order, the optimizer, the initialisation, the loss scaling) fails it, so
// such a change is a conscious update of that file, reviewed with its diff.
// With MEGASCALE_UPDATE_GOLDEN=1 the test rewrites the file from this run instead (and says so).
// The trace is exact for the SIMD level it was recorded on (the file's `isa` line: the kernels'
// and oneDNN's code paths differ between AVX-512 and AVX2); on another level the run is compared
// within 1e-5 relative, with a note.
// The committed values are also checked against an independent oracle: PyTorch (float64,
// tests/py/torch_gpt.py, the fixture of tests/model/test_torch_reference) trained from the same
// initial weights on the same tokens, within 1e-5 relative per step.
// Only Trainer's public API is used: Trainer(cfg), train_step (and model() to export the initial
// weights for the oracle).
#include <gtest/gtest.h>

#include <algorithm>  // std::copy_n, std::max
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/cpu_features.h"  // cpu_has_avx512f, cpu_has_avx2_fma
#include "base/safetensors.h"
#include "common/test_util.h"
#include "model/hf_export.h"
#include "train/trainer.h"

namespace ms {
namespace {

constexpr int kSteps = 12;

// The fixed run: a 2-layer GPT over a 91-token vocabulary (padded to 128), constant learning rate,
// weight decay and clipping on, fp32 GEMMs, one micro-batch of 3 x 12 tokens per step.
Config golden_config() {
  Config c;
  c.model.vocab_size = 91;
  c.model.pad_vocab_to = 64;
  c.model.n_layer = 2;
  c.model.n_head = 4;
  c.model.n_embd = 32;
  c.model.max_seq_len = 16;
  c.model.init_std = 0.1f;
  c.optim.name = OptimizerKind::kAdamW;
  c.optim.lr = 3e-3f;
  c.optim.min_lr = 3e-3f;  // constant: the oracle's torch.optim.AdamW has no schedule
  c.optim.warmup_steps = 0;
  c.optim.weight_decay = 0.1f;
  c.optim.grad_clip = 1.0f;
  c.data.train = "unused";
  c.train.batch_size = 3;
  c.train.seq_len = 12;
  c.train.grad_accum = 1;
  c.train.steps = kSteps;
  c.train.seed = 42;
  c.train.precision = DType::kF32;
  c.validate();
  return c;
}

// The token stream, steps x B x T: inputs from a 64-bit LCG (fixed constants, fixed seed), targets
// (3 * input + 1) mod V, a learnable map, so the loss falls.
struct Tokens {
  std::vector<int32_t> inputs, targets;
};
Tokens golden_tokens(const Config& c) {
  const int V = c.model.vocab_size;
  const size_t n = static_cast<size_t>(kSteps) * c.train.batch_size * c.train.seq_len;
  Tokens t;
  uint64_t x = 20240601;
  for (size_t i = 0; i < n; i++) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    t.inputs.push_back(static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(V)));
    t.targets.push_back((3 * t.inputs.back() + 1) % V);
  }
  return t;
}

// The SIMD level the kernels run at, which decides their rounding.
std::string simd_level() {
  if (cpu_has_avx512f()) return "avx512";
  if (cpu_has_avx2_fma()) return "avx2";
  return "baseline";
}

std::vector<float> run_golden(const Config& cfg, const Tokens& tok, Trainer& trainer) {
  const size_t per_step = static_cast<size_t>(cfg.train.batch_size) * cfg.train.seq_len;
  std::vector<float> losses;
  for (int s = 0; s < kSteps; s++) {
    const StepStats st = trainer.train_step([&](int* in, int* tg) {
      std::copy_n(tok.inputs.data() + s * per_step, per_step, in);
      std::copy_n(tok.targets.data() + s * per_step, per_step, tg);
    });
    losses.push_back(st.loss);
  }
  return losses;
}

std::string golden_path() { return std::string(MEGASCALE_SOURCE_DIR) + "/tests/train/golden_loss.txt"; }

struct Golden {
  std::string isa;
  std::vector<float> losses;
  std::vector<std::string> text;  // each loss as written in the file
};

// Reads "isa LEVEL" and "STEP LOSS" lines; '#' starts a comment.
Golden read_golden(const std::string& path) {
  Golden g;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string first;
    ls >> first;
    if (first == "isa") {
      ls >> g.isa;
      continue;
    }
    std::string text;
    float loss = 0;
    EXPECT_TRUE(ls >> text && std::istringstream(text) >> loss) << path << ": cannot read '" << line << "'";
    EXPECT_EQ(first, std::to_string(g.losses.size() + 1)) << path << ": steps must be 1, 2, ... in order";
    g.losses.push_back(loss);
    g.text.push_back(text);
  }
  return g;
}

void write_golden(const std::string& path, const std::vector<float>& losses) {
  std::string out =
      "# golden_loss.txt: the training loss of each step of tests/train/test_golden_loss.cpp's fixed run\n"
      "# (fp32, one process, 12 AdamW steps of a 2-layer GPT on a fixed synthetic token stream).\n"
      "# The test compares its run with these values EXACTLY (%.9g round-trips a float): a change of\n"
      "# numerics (kernel summation order, optimizer, initialisation, loss scaling) fails it until this\n"
      "# file is updated on purpose, so every such change is a conscious one, visible in review.\n"
      "# The values are also checked against PyTorch (float64) within 1e-5 relative by the same test.\n"
      "# To update after an intended change: MEGASCALE_UPDATE_GOLDEN=1 build/test_golden_loss, then\n"
      "# commit this file with a message saying why the numbers moved.\n"
      "# isa: the SIMD level the values were recorded at (exact only there; elsewhere 1e-5 relative).\n";
  out += fmt::format("isa {}\n# step loss\n", simd_level());
  for (size_t i = 0; i < losses.size(); i++) out += fmt::format("{} {:.9g}\n", i + 1, losses[i]);
  testing::spit(path, out);
}

bool update_requested() {
  const char* e = std::getenv("MEGASCALE_UPDATE_GOLDEN");
  return e && std::string(e) == "1";
}

TEST(GoldenLoss, EveryStepEqualsTheCommittedTraceExactly) {
  const Config cfg = golden_config();
  const Tokens tok = golden_tokens(cfg);
  Trainer trainer(cfg);
  const std::vector<float> losses = run_golden(cfg, tok, trainer);
  if (update_requested()) {
    write_golden(golden_path(), losses);
    std::printf("MEGASCALE_UPDATE_GOLDEN=1: wrote %d step losses to %s (review and commit it)\n", kSteps,
                golden_path().c_str());
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(golden_path())) << golden_path() << " is missing; create it with "
                                                      << "MEGASCALE_UPDATE_GOLDEN=1";
  const Golden g = read_golden(golden_path());
  ASSERT_EQ(g.losses.size(), losses.size()) << golden_path();
  const bool exact = g.isa == simd_level();
  if (!exact)
    std::printf("note: %s was recorded at SIMD level '%s', this CPU runs '%s': comparing within 1e-5 relative\n",
                golden_path().c_str(), g.isa.c_str(), simd_level().c_str());
  for (size_t i = 0; i < losses.size(); i++) {
    if (exact)
      EXPECT_EQ(fmt::format("{:.9g}", losses[i]), g.text[i])
          << "step " << i + 1 << ": the numerics changed. If intended, update the file: "
          << "MEGASCALE_UPDATE_GOLDEN=1 build/test_golden_loss (see its header)";
    else
      EXPECT_NEAR(losses[i], g.losses[i], 1e-5 * std::fabs(g.losses[i])) << "step " << i + 1;
    std::printf("step %2zu loss %.9g (golden %.9g)\n", i + 1, losses[i], g.losses[i]);
  }
  EXPECT_LT(losses.back(), losses.front()) << "the fixed run should learn";
}

// The committed trace against PyTorch in float64, from the same initial weights and tokens.
TEST(GoldenLoss, CommittedTraceAgreesWithPyTorch) {
  const Config cfg = golden_config();
  const Tokens tok = golden_tokens(cfg);
  const Golden g = read_golden(golden_path());
  ASSERT_EQ(static_cast<int>(g.losses.size()), kSteps) << golden_path();
  const int B = cfg.train.batch_size, T = cfg.train.seq_len;
  Trainer trainer(cfg);  // its initial weights are the golden run's
  const std::string dir = testing::make_temp_dir("golden_loss");
  export_hf(trainer.model(), dir + "/model");
  StFile batch;
  batch.tensors["inputs"] = st_i32({kSteps, B, T}, tok.inputs.data());
  batch.tensors["targets"] = st_i32({kSteps, B, T}, tok.targets.data());
  save_safetensors(dir + "/batch.safetensors", batch);
  testing::spit(dir + "/hyper.json",
                nlohmann::json{{"lr", cfg.optim.lr}, {"beta1", cfg.optim.beta1}, {"beta2", cfg.optim.beta2},
                               {"eps", cfg.optim.eps}, {"weight_decay", cfg.optim.weight_decay},
                               {"grad_clip", cfg.optim.grad_clip}}.dump());
  const auto r = testing::run_cmd(fmt::format("{} {}/tests/py/torch_gpt.py {}/model {}/batch.safetensors {}/hyper.json "
                                              "{}/ref.safetensors", testing::torch_python(), MEGASCALE_SOURCE_DIR,
                                              dir, dir, dir, dir));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<double> ref = load_safetensors(dir + "/ref.safetensors").at("losses").to_f64();
  ASSERT_EQ(static_cast<int>(ref.size()), kSteps);
  double worst = 0;
  for (int s = 0; s < kSteps; s++) {
    EXPECT_NEAR(g.losses[s], ref[s], 1e-5 * std::fabs(ref[s])) << "step " << s + 1;
    worst = std::max(worst, std::fabs(g.losses[s] - ref[s]) / std::fabs(ref[s]));
  }
  std::printf("golden trace vs PyTorch float64: worst step-loss relative error %.3g\n", worst);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ms
