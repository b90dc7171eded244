// test_plan_cli: `megascale plan` as a user runs it: --json prints one object whose time split sums
// to step_time_s, with mfu, fits_memory, the layout and "calibrated" (true on the A100 cluster,
// whose constants are fitted; false on the H100, whose are not); MFU is eq. 7's FLOPs over the step at the cluster's peak; the text output names the
// same step, with the range one held-out RMS either side (none for the unvalidated H100); without layout flags it searches and its answer is no slower than the published
// layout's prediction, and planning the answer's layout explicitly gives the same step; bad input
// is one named error with exit code 1 (an unknown cluster, a layout the model cannot split).
// `--calibrate-host --device cuda` on a GPU writes a cluster file the planner loads, with measured
// compute constants and "compute constants calibrated, communication NOT"; without a GPU it is one
// named error that says why no device opens, and no file.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/device.h"  // cuda_available
#include "common/test_util.h"
#include "../plan/host_fixture.h"
#include "plan/cluster_desc.h"
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
  EXPECT_EQ(j["calibrated"], true);
  EXPECT_EQ(j["mfu_convention"], "megatron-72");
  EXPECT_TRUE(j["fits_memory"].get<bool>());
  EXPECT_EQ(j["layout"]["dp"], 4);
  // The range: one held-out RMS of the MFU either side (the a100's [uncertainty]).
  const double mfu = j["mfu"].get<double>(), rms = ms::plan::builtin_cluster("a100-80g").uncertainty.mfu_points / 100;
  EXPECT_NEAR(j["interval"]["mfu"][0].get<double>(), mfu - rms, 1e-12) << j.dump();
  EXPECT_NEAR(j["interval"]["step_time_s"][1].get<double>(), step * mfu / (mfu - rms), 1e-9 * step) << j.dump();
  const std::string trace = ms::testing::make_temp_dir("plan_trace") + "/plan.json";
  ASSERT_EQ(ms::testing::run_cmd(plan(std::string(kLayout) + " --explain " + trace)).code, 0);
  const auto tr = nlohmann::json::parse(ms::testing::slurp(trace));
  EXPECT_NEAR(tr["otherData"]["step_time_s"].get<double>(), step, 1e-9 * step);
  EXPECT_GT(tr["traceEvents"].size(), 2u * 8 * 192);  // 8 stages x 192 micro-batches x forward + backward
  const auto text = ms::testing::run_cmd(plan(kLayout));
  EXPECT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("calibrated constants"), std::string::npos) << text.output;
  const auto h100 = ms::testing::run_cmd(plan(std::string(kLayout) + " --cluster h100-80g"));
  EXPECT_EQ(h100.code, 0) << h100.output;
  EXPECT_NE(h100.output.find("NOT calibrated"), std::string::npos) << h100.output;
  EXPECT_NE(h100.output.find("range: unknown"), std::string::npos) << h100.output;
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

// A training config with overrides is planned as its flags would be: the config's [train] and
// [parallel] give the layout (dp from --gpus, the batch from batch_size x grad_accum x dp), and
// the same prediction comes back with the layout spelled as flags; a bad override is the config's
// named error. A CPU host file's output says it is calibrated (its tables are measurements).
TEST(PlanCli, TrainingConfigWithOverridesPlansLikeItsFlags) {
  const std::string dir = ms::testing::make_temp_dir("plan_cfg");
  std::ofstream(dir + "/host.toml") << ms::testing::host_toml(100, 50, 10, 1, 100);
  std::ofstream(dir + "/cfg.toml") << "[model]\nn_layer = 4\nn_embd = 64\nn_head = 2\nvocab_size = 128\n"
                                      "max_seq_len = 128\n[train]\nbatch_size = 2\nseq_len = 128\nprecision = \"fp32\"\n";
  const std::string base = std::string(MEGASCALE_BINARY) + " plan " + dir + "/cfg.toml";
  const auto cfg = ms::testing::run_cmd(base + " --parallel.pp=2 --train.grad_accum 4 --parallel.schedule=interleaved "
                                               "--parallel.virtual_stages=2 --cluster " + dir +
                                        "/host.toml --gpus 4 --json 2>/dev/null");
  ASSERT_EQ(cfg.code, 0) << cfg.output;
  const auto j = nlohmann::json::parse(cfg.output);
  EXPECT_EQ(j["layout"]["dp"], 2);
  EXPECT_EQ(j["layout"]["pp"], 2);
  EXPECT_EQ(j["layout"]["virtual_stages"], 2);
  EXPECT_EQ(j["calibrated"], true);
  const auto flags = ms::testing::run_cmd(std::string(MEGASCALE_BINARY) + " plan --model " + dir +
                                          "/cfg.toml --gpus 4 --batch 16 --tp 1 --pp 2 --virtual-stages 2 "
                                          "--schedule interleaved --micro-batch 2 --dtype fp32 --overlap tp-bwd,pp,dp "
                                          "--tp-chunks 1 --cluster " + dir + "/host.toml --json 2>/dev/null");
  ASSERT_EQ(flags.code, 0) << flags.output;
  EXPECT_EQ(nlohmann::json::parse(flags.output)["step_time_s"].get<double>(), j["step_time_s"].get<double>());
  const auto bad = ms::testing::run_cmd(base + " --parallel.pp=3 --cluster " + dir + "/host.toml --gpus 3");
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("pp"), std::string::npos) << bad.output;
  const auto unknown = ms::testing::run_cmd(base + " --parallel.nope=1 --cluster " + dir + "/host.toml --gpus 1");
  EXPECT_EQ(unknown.code, 1) << unknown.output;
  EXPECT_NE(unknown.output.find("parallel.nope"), std::string::npos) << unknown.output;
}

// --calibrate-host (a small grid) measures this machine and writes a host file that loads back as
// a CPU host with every table, Gloo and MPI collectives among them, and plans a run.
TEST(PlanCli, CalibrateHostWritesALoadableHostFile) {
  const std::string dir = ms::testing::make_temp_dir("plan_calibrate");
  const auto r = ms::testing::run_cmd(std::string(MEGASCALE_BINARY) + " plan --calibrate-host --quick --ranks 2 --out " +
                                      dir + "/host.toml");
  ASSERT_EQ(r.code, 0) << r.output;
  const ms::plan::ClusterDesc c = ms::plan::load_cluster(dir + "/host.toml");
  EXPECT_EQ(c.device.kind, "cpu");
  EXPECT_EQ(c.device.comm_engine, "cores");
  EXPECT_GT(c.device.cores, 0);
  EXPECT_EQ(c.host.threads.back(), c.device.cores);
  for (const char* b : {"gloo", "mpi"})
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"})
      EXPECT_GT(c.host.collective_seconds(b, op, 1 << 20, 2), 0.0) << b << " " << op;
  EXPECT_GT(c.host.gemm_seconds(ms::DType::kF32, 1, 256, 256, 256, true), 0.0);
  std::ofstream(dir + "/cfg.toml") << "[model]\nn_layer = 2\nn_embd = 64\nn_head = 2\nvocab_size = 128\n"
                                      "max_seq_len = 128\n[train]\nbatch_size = 2\nseq_len = 128\n";
  const auto p = ms::testing::run_cmd(std::string(MEGASCALE_BINARY) + " plan " + dir + "/cfg.toml --parallel.tp=2 "
                                      "--cluster " + dir + "/host.toml --gpus 2 --json 2>/dev/null");
  ASSERT_EQ(p.code, 0) << p.output;
  EXPECT_GT(nlohmann::json::parse(p.output)["time_split_s"]["tp_exposed"].get<double>(), 0.0);
}

TEST(PlanCli, CalibrateGpuWritesAClusterFileOrSaysWhyNot) {
  const std::string dir = ms::testing::make_temp_dir("plan_calibrate_gpu");
  const std::string out = dir + "/gpu.toml";
  const auto r = ms::testing::run_cmd(std::string(MEGASCALE_BINARY) + " plan --calibrate-host --device cuda --quick --out " +
                                      out);
  if (!ms::cuda_available()) {  // CI: the named error, and nothing written
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("--device cuda: no CUDA device opens: "), std::string::npos) << r.output;
    EXPECT_FALSE(std::ifstream(out).good());
    return;
  }
  ASSERT_EQ(r.code, 0) << r.output;
  const ms::plan::ClusterDesc c = ms::plan::load_cluster(out);
  EXPECT_EQ(c.device.kind, "gpu");
  for (const char* key : {"gemm_eta_inf", "flash_eta", "mem_eta"}) {
    ASSERT_EQ(c.efficiency.count(key), 1u) << key;
    EXPECT_GT(c.efficiency.at(key), 0.05) << key;  // a kernel under 5% of the card's peak is a broken measurement
  }
  EXPECT_EQ(c.efficiency.count("intra_eta"), 0u);
  const auto p = ms::testing::run_cmd(plan("--cluster " + out + " --gpus 64 --batch 64 --tp 8 --pp 8"));
  ASSERT_EQ(p.code, 0) << p.output;
  EXPECT_NE(p.output.find("compute constants calibrated, communication NOT"), std::string::npos) << p.output;
}

}  // namespace
