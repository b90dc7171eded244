// test_hf_export: export_hf then import_hf round-trips every parameter bit for bit (into a model
// initialised differently, so an import that writes nothing fails), the exported file is in
// Hugging Face's layout (Conv1D weights transposed to (in, out), token embedding cut to the real
// vocabulary, no LM head), and import rejects a damaged or mismatched folder with an error that
// names the file and the tensor: missing tensor, wrong dtype, wrong shape (another model size),
// non-finite value, truncated file, missing folder. Export refuses non-finite weights and leaves
// no folder behind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/safetensors.h"
#include "common/test_util.h"
#include "model/gpt.h"
#include "model/hf_export.h"
#include "model/hf_import.h"

using ms::testing::expect_error;

using namespace ms;
namespace fs = std::filesystem;

namespace {

// Vocabulary 100, padded to 128: the export cuts 28 rows.
ModelConfig tiny(bool parallel) { return ms::testing::tiny_model_config(32, 16, parallel, 4); }

// Every parameter distinct and nonzero (biases and LayerNorm are 0/1 at init), padded vocabulary
// rows zero as training keeps them (they never receive a gradient).
void fill(GPT& g, uint64_t seed) {
  g.init_weights(seed);
  ms::testing::TestRng rng(seed);
  float* p = g.params();
  for (size_t i = 0; i < g.num_params(); i++) p[i] += 0.05f * rng.uniform();
  const ModelConfig& m = g.config();
  for (const ParamSpec& s : g.param_specs())
    if (s.name == "transformer.wte.weight")
      std::fill(p + s.offset + static_cast<size_t>(m.vocab_size) * m.n_embd, p + s.offset + s.numel(), 0.0f);
}

class HfExport : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "hf_export"; }
};

TEST_F(HfExport, RoundTripsEveryParameterBitForBit) {
  for (bool parallel : {false, true}) {
    const ModelConfig m = tiny(parallel);
    GPT src(m, 1, 8), dst(m, 1, 8);
    fill(src, 3);
    fill(dst, 4);
    const GPT& a = src;
    const GPT& b = dst;
    ASSERT_NE(0, std::memcmp(a.params(), b.params(), a.num_params() * sizeof(float))) << "the models start equal";
    const std::string dir = path(parallel ? "parallel" : "sequential");
    export_hf(src, dir);
    import_hf(dst, dir);
    EXPECT_EQ(0, std::memcmp(a.params(), b.params(), a.num_params() * sizeof(float)))
        << "import(export(w)) differs from w";
    for (const ParamSpec& s : a.param_specs())
      EXPECT_EQ(0, std::memcmp(a.params() + s.offset, b.params() + s.offset, s.numel() * sizeof(float))) << s.name;

    // The file's layout is Hugging Face's.
    const StFile f = load_safetensors(dir + "/model.safetensors");
    EXPECT_EQ(f.tensors.size(), a.param_specs().size()) << "one tensor per parameter, no LM head";
    EXPECT_EQ(f.tensors.count("lm_head.weight"), 0u);
    for (const ParamSpec& s : a.param_specs()) {
      ASSERT_EQ(f.tensors.count(s.name), 1u) << s.name;
      const StTensor& t = f.tensors.at(s.name);
      EXPECT_EQ(t.dtype, DType::kF32) << s.name;
      const float* p = a.params() + s.offset;
      if (s.kind == ParamKind::kWeight) {  // nn.Linear (out, in) -> Conv1D (in, out)
        const int O = s.shape[0], I = s.shape[1];
        ASSERT_EQ(t.shape, (std::vector<int64_t>{I, O})) << s.name;
        for (int o = 0; o < O; o += 7)
          for (int i = 0; i < I; i += 5)
            ASSERT_EQ(t.f32()[static_cast<size_t>(i) * O + o], p[static_cast<size_t>(o) * I + i]) << s.name;
      } else if (s.name == "transformer.wte.weight") {
        ASSERT_EQ(t.shape, (std::vector<int64_t>{m.vocab_size, m.n_embd}));
        EXPECT_EQ(0, std::memcmp(t.f32(), p, t.numel() * sizeof(float)));
      } else {
        EXPECT_EQ(t.numel(), s.numel()) << s.name;
        EXPECT_EQ(0, std::memcmp(t.f32(), p, s.numel() * sizeof(float))) << s.name;
      }
    }
    const auto cfg = nlohmann::json::parse(ms::testing::slurp(dir + "/config.json"));
    EXPECT_EQ(cfg["model_type"], "gpt2");
    EXPECT_EQ(cfg["vocab_size"], m.vocab_size);
    EXPECT_EQ(cfg["n_layer"], m.n_layer);
    EXPECT_EQ(cfg["n_head"], m.n_head);
    EXPECT_EQ(cfg["n_embd"], m.n_embd);
    EXPECT_EQ(cfg["n_positions"], m.max_seq_len);
    EXPECT_EQ(cfg["tie_word_embeddings"], true);
    EXPECT_EQ(cfg["megascale_block"], config_name(m.block));
    EXPECT_EQ(cfg["megascale_attention"], config_name(m.attention));
    EXPECT_EQ(cfg["megascale_window"], parallel ? m.window : 0);
    EXPECT_FALSE(fs::exists(dir + ".tmp")) << "the temporary folder was left behind";
  }
}

TEST_F(HfExport, ImportRejectsDamagedOrMismatchedFilesByName) {
  const ModelConfig m = tiny(false);
  GPT src(m, 1, 8), dst(m, 1, 8);
  fill(src, 5);
  const std::string good = path("good");
  export_hf(src, good);
  const std::string file = good + "/model.safetensors";
  const StFile f = load_safetensors(file);

  // Writes a copy of the good export with `edit` applied to its tensors; returns its folder.
  auto variant = [&](const std::string& name, auto edit) {
    StFile g = f;
    edit(g);
    fs::create_directories(path(name));
    save_safetensors(path(name) + "/model.safetensors", g);
    fs::copy_file(good + "/config.json", path(name) + "/config.json", fs::copy_options::overwrite_existing);
    return path(name);
  };
  const std::string bias = "transformer.h.0.ln_1.bias";
  const std::string attn = "transformer.h.1.attn.c_attn.weight";
  std::string d = variant("missing", [&](StFile& g) { g.tensors.erase(bias); });
  expect_error([&] { import_hf(dst, d); }, {d + "/model.safetensors", "missing tensor '" + bias + "'"});

  d = variant("dtype", [&](StFile& g) {
    std::vector<int32_t> ints(g.tensors.at(bias).numel(), 1);
    g.tensors[bias] = st_i32(g.tensors.at(bias).shape, ints.data());
  });
  expect_error([&] { import_hf(dst, d); }, {"tensor '" + bias + "' has dtype I32, expected F32, F16 or BF16"});

  d = variant("transposed", [&](StFile& g) {  // nn.Linear layout instead of Conv1D's
    StTensor& t = g.tensors.at(attn);
    std::swap(t.shape[0], t.shape[1]);
  });
  expect_error([&] { import_hf(dst, d); }, {"tensor '" + attn + "' has shape [96,32], expected [32,96]"});

  d = variant("nan", [&](StFile& g) {
    StTensor& t = g.tensors.at(attn);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(t.bytes.data() + 17 * sizeof(float), &nan, sizeof(float));
  });
  expect_error([&] { import_hf(dst, d); }, {"tensor '" + attn + "' holds a non-finite value at 17"});

  // Another model size: every shape differs; the first tensor checked is named.
  ModelConfig wide = m;
  wide.n_embd = 64;
  GPT other(wide, 1, 8);
  expect_error([&] { import_hf(other, good); }, {file, "has shape [", "expected ["});

  // A truncated file and a missing folder: errors naming the file.
  const std::string bytes = ms::testing::slurp(file);
  ms::testing::spit(path("truncated/model.safetensors"), bytes.substr(0, bytes.size() / 2));
  expect_error([&] { import_hf(dst, path("truncated")); }, {path("truncated") + "/model.safetensors"});
  expect_error([&] { import_hf(dst, path("absent")); }, {path("absent") + "/model.safetensors"});

  // The good folder still imports, bit for bit (the failures above did not depend on dst's state).
  import_hf(dst, good);
  const GPT& a = src;
  const GPT& b = dst;
  EXPECT_EQ(0, std::memcmp(a.params(), b.params(), a.num_params() * sizeof(float)));
}

TEST_F(HfExport, ExportRefusesNonFiniteWeightsAndWritesNothing) {
  GPT g(tiny(false), 1, 8);
  fill(g, 6);
  g.params()[123] = std::numeric_limits<float>::infinity();
  const std::string dir = path("bad");
  expect_error([&] { export_hf(g, dir); }, {dir, "parameter 123 is not finite"});
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_FALSE(fs::exists(dir + ".tmp"));
}

}  // namespace
