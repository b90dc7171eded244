// test_init_from: `megascale train --train.init_from=FOLDER` end to end: a Llama folder written by
// PyTorch (tests/py/make_hf_folder.py) sets the model and its weights; the run trains, says where
// its weights came from, and exports a LlamaForCausalLM folder that PyTorch reads with the run's
// loss; on two tensor-parallel ranks it starts from the same loss. A folder megascale cannot
// honour stops the run with the named field before any step.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/layout_runs.h"  // megascale_bin, launch
#include "common/test_util.h"
#include "data/token_shard.h"

namespace {

using namespace ms::testing;

class InitFrom : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = make_temp_dir("init_from");
    std::vector<uint16_t> tokens(6000);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = static_cast<uint16_t>((i * 31 + i / 7) % 300);
    ms::write_token_shard(dir + "/train.bin", tokens);
    const std::string shape = R"({"vocab": 320, "hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "ffn": 48,
                                  "positions": 64, "tied": false, "theta": 10000.0, "window": 8})";
    const auto r = run_cmd(fmt::format("{} {}/tests/py/make_hf_folder.py llama BF16 2 {}/hf '{}'", torch_python(),
                                       MEGASCALE_SOURCE_DIR, dir, shape));
    ASSERT_EQ(r.code, 0) << r.output;
    std::ofstream(dir + "/run.toml") << "[train]\nsteps = 4\nbatch_size = 2\nseq_len = 32\nsample_tokens = 0\n"
                                        "eval_every = 0\neval_batches = 1\nthreads = 1\nprogress = \"lines\"\n"
                                        "[optim]\nlr = 1e-3\nwarmup_steps = 0\n[data]\ntrain = \"" + dir + "/train.bin\"\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  CmdResult train(const std::string& prefix, const std::string& out, const std::string& extra) {
    return run_cmd(prefix + " train " + dir + "/run.toml --train.out_dir=" + dir + "/" + out + " " + extra);
  }
  double first_loss(const std::string& out) {
    std::ifstream f(dir + "/" + out + "/log.jsonl");
    for (std::string line; std::getline(f, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("loss") && j.value("step", 0) == 1) return j["loss"].get<double>();
    }
    ADD_FAILURE() << "no step 1 in " << out;
    return 0;
  }
  std::string dir;
};

TEST_F(InitFrom, TrainsFromAHuggingFaceFolderAndExportsLlama) {
  const auto r = train(megascale_bin(), "run", "--train.init_from=" + dir + "/hf");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("weights from " + dir + "/hf"), std::string::npos) << r.output;
  const auto resolved = slurp(dir + "/run/config.resolved.toml");
  EXPECT_NE(resolved.find("norm = 'rmsnorm'"), std::string::npos) << resolved;
  EXPECT_NE(resolved.find("n_kv_head = 2"), std::string::npos) << resolved;
  const auto cfg = nlohmann::json::parse(slurp(dir + "/run/model/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(cfg["num_key_value_heads"], 2);
  EXPECT_EQ(cfg["tie_word_embeddings"], false);
  // Two tensor-parallel ranks start from the same weights: the same first loss (fp32 association).
  const auto tp = train(launch(2), "tp2", "--train.init_from=" + dir + "/hf --parallel.tp=2 --model.pad_vocab_to=64");
  ASSERT_EQ(tp.code, 0) << tp.output;
  EXPECT_NEAR(first_loss("tp2"), first_loss("run"), 1e-5 * first_loss("run"));
}

TEST_F(InitFrom, AFolderMegascaleCannotHonourStopsBeforeAnyStep) {
  auto j = nlohmann::json::parse(slurp(dir + "/hf/config.json"));
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  std::ofstream(dir + "/hf/config.json") << j.dump();
  const auto r = train(megascale_bin(), "bad", "--train.init_from=" + dir + "/hf");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("rope_scaling"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 1"), std::string::npos) << r.output;
}

}  // namespace
