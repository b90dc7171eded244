// test_plan_cli: `megascale plan` as a user runs it: --json prints one object whose time split sums
// to step_time_s, with mfu, fits_memory, the layout and "calibrated": false (the constants are not
// fitted yet); MFU is eq. 7's FLOPs over the step at the cluster's peak; the text output names the
// same step; without layout flags it searches and its answer is no slower than the published
// layout's prediction, and planning the answer's layout explicitly gives the same step; bad input
// is one named error with exit code 1 (an unknown cluster, a layout the model cannot split).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "plan/model_math.h"

namespace {

std::string model_file() {
  const std::string dir = ms::testing::make_temp_dir("plan_cli");
  std::ofstream(dir + "/m.toml") << "[model]\nn_layer = 96\nn_embd = 12288\nn_head = 128\nvocab_size = 64000\n"
                                    "max_seq_len = 2048\n[train]\nseq_len = 2048\n";
  return dir + "/m.toml";
}

std::string plan(const std::string& args) {
  return std::string(MEGASCALE_BINARY) + " plan --model " + model_file() + " " + args;
}

const char* kLayout = "--gpus 256 --batch 768 --tp 8 --pp 8 --virtual-stages 6 --schedule interleaved --micro-batch 1";

TEST(PlanCli, JsonStepSplitAndMfu) {
  const auto r = ms::testing::run_cmd(plan(std::string(kLayout) + " --cluster a100-80g --json 2>/dev/null"));
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const double step = j["step_time_s"].get<double>();
  double sum = 0;
  for (const auto& [k, v] : j["time_split_s"].items()) sum += v.get<double>();
  EXPECT_NEAR(sum, step, 1e-9 * step) << j.dump();
  ms::plan::GptShape s;
  s.layers = 96, s.hidden = 12288, s.heads = 128, s.seq = 2048, s.vocab = 64000;
  EXPECT_NEAR(j["mfu"].get<double>(), ms::plan::megatron_flops_per_token(s) * 768 * 2048 / (step * 256 * 312e12), 1e-9);
  EXPECT_EQ(j["calibrated"], false);
  EXPECT_EQ(j["mfu_convention"], "megatron-72");
  EXPECT_TRUE(j["fits_memory"].get<bool>());
  EXPECT_EQ(j["layout"]["dp"], 4);
  const std::string trace = ms::testing::make_temp_dir("plan_trace") + "/plan.json";
  ASSERT_EQ(ms::testing::run_cmd(plan(std::string(kLayout) + " --explain " + trace)).code, 0);
  const auto tr = nlohmann::json::parse(ms::testing::slurp(trace));
  EXPECT_NEAR(tr["otherData"]["step_time_s"].get<double>(), step, 1e-9 * step);
  EXPECT_GT(tr["traceEvents"].size(), 2u * 8 * 192);  // 8 stages x 192 micro-batches x forward + backward
  const auto text = ms::testing::run_cmd(plan(kLayout));
  EXPECT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("NOT calibrated"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("dp 4"), std::string::npos) << text.output;
}

TEST(PlanCli, SearchBeatsThePublishedLayoutAndReplansTheSame) {
  const auto given = ms::testing::run_cmd(plan(std::string(kLayout) + " --json 2>/dev/null"));
  const auto searched =
      ms::testing::run_cmd(plan("--gpus 256 --batch 768 --recompute none --top 2 --json 2>/dev/null"));
  ASSERT_EQ(given.code, 0) << given.output;
  ASSERT_EQ(searched.code, 0) << searched.output;
  const auto g = nlohmann::json::parse(given.output), s = nlohmann::json::parse(searched.output);
  EXPECT_LE(s["step_time_s"].get<double>(), g["step_time_s"].get<double>());
  EXPECT_GT(s["searched"]["fitting"].get<int>(), 0) << s.dump();
  ASSERT_EQ(s["alternatives"].size(), 1u);
  EXPECT_LE(s["step_time_s"].get<double>(), s["alternatives"][0]["step_time_s"].get<double>());
  const auto& l = s["layout"];
  const std::string again = fmt::format(
      "--gpus 256 --batch 768 --recompute none --tp {} --pp {} --virtual-stages {} "
      "--schedule {} --micro-batch {} --json 2>/dev/null",
      l["tp"].get<int>(), l["pp"].get<int>(), l["virtual_stages"].get<int>(), l["schedule"].get<std::string>(),
      l["micro_batch"].get<int>());
  const auto r = ms::testing::run_cmd(plan(again));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["step_time_s"].get<double>(), s["step_time_s"].get<double>());
}

TEST(PlanCli, BadInputIsNamed) {
  auto fails = [](const std::string& cmd, const std::string& what) {
    const auto r = ms::testing::run_cmd(cmd);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find(what), std::string::npos) << r.output;
  };
  fails(plan(std::string(kLayout) + " --cluster v100"), "cluster 'v100': no such file, and not a built-in name");
  fails(plan("--gpus 256 --batch 768 --tp 8 --pp 7 --virtual-stages 1 --schedule 1f1b --micro-batch 1"),
        "--gpus 256 is not a multiple of tp 8 x pp 7");
  fails(plan("--gpus 280 --batch 280 --tp 8 --pp 35 --virtual-stages 1 --schedule 1f1b --micro-batch 1"), "96 layers");
  fails(plan(std::string(kLayout) + " --overlap tp,zz"), "--overlap item 'zz'");
}

}  // namespace
