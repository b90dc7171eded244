// Bad inputs to `megascale train` / `prepare` end with a named error and a non-zero exit, before
// any training: bad shards (wrong magic, truncated, token id >= vocab), impossible configs (heads
// not dividing C, window <= 0, lr NaN, unknown key, missing data path). Shards here are written
// byte by byte following llm.c's published format, independently of the project's writer.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/device.h"  // cuda_available, cuda_built
#include "common/test_util.h"

namespace {

using ms::testing::run_cmd;

// llm.c shard: 256 int32 header (magic, version, count), then uint16 tokens.
void write_shard(const std::string& path, int32_t magic, int32_t version, int32_t count,
                 const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic; header[1] = version; header[2] = count;
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  f.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
}

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = ms::testing::make_temp_dir("cli");
    std::vector<uint16_t> tokens(4000);
    for (size_t i = 0; i < tokens.size(); i++) tokens[i] = static_cast<uint16_t>((i * 7919) % 50257);
    write_shard(dir + "/good.bin", 20240520, 1, 4000, tokens);
    std::ofstream(dir + "/ok.toml") << "[model]\nn_layer = 1\nn_head = 2\nn_embd = 16\nmax_seq_len = 32\n"
                                       "[train]\nsteps = 1\nbatch_size = 2\nseq_len = 16\nsample_tokens = 0\n"
                                       "eval_batches = 1\nprogress = \"lines\"\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  // Runs train with the given extra arguments; expects failure and a message containing `needle`.
  void expect_error(const std::string& args, const std::string& needle) {
    auto r = run_cmd(std::string(MEGASCALE_BINARY) + " train " + dir + "/ok.toml --train.out_dir=" + dir +
                     "/run " + args);
    EXPECT_NE(r.code, 0) << "expected failure for: " << args << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "missing '" << needle << "' in:\n" << r.output;
    EXPECT_EQ(r.output.find("step "), std::string::npos) << "training started despite the error:\n" << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir + "/run/model")) << "a model was exported";
  }
  std::string dir;
};

TEST_F(CliErrors, GoodShardTrainsOneStep) {
  // The control: the same command with a good shard succeeds (so the failures below are real).
  auto r = run_cmd(std::string(MEGASCALE_BINARY) + " train " + dir + "/ok.toml --train.out_dir=" + dir +
                   "/run --data.train=" + dir + "/good.bin");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/run/model/model.safetensors"));
}

TEST_F(CliErrors, EmptyValueDoesNotSwallowTheNextArgument) {
  // `--data.val=` sets an empty value (no validation); the argument after it must still count.
  auto r = run_cmd(std::string(MEGASCALE_BINARY) + " train " + dir + "/ok.toml --data.val= --train.out_dir=" + dir +
                   "/run2 --data.train=" + dir + "/good.bin");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/run2/model/model.safetensors")) << r.output;
}

TEST_F(CliErrors, WrongMagic) {
  write_shard(dir + "/bad.bin", 12345, 1, 100, std::vector<uint16_t>(100, 1));
  expect_error("--data.train=" + dir + "/bad.bin", "bad.bin");
  expect_error("--data.train=" + dir + "/bad.bin", "magic");
}

TEST_F(CliErrors, TruncatedShard) {
  write_shard(dir + "/trunc.bin", 20240520, 1, 1000, std::vector<uint16_t>(600, 1));
  expect_error("--data.train=" + dir + "/trunc.bin", "trunc.bin");
  expect_error("--data.train=" + dir + "/trunc.bin", "truncated");
}

TEST_F(CliErrors, TokenIdAtLeastVocab) {
  std::vector<uint16_t> t(1000, 5);
  t[17] = 50300;
  write_shard(dir + "/big.bin", 20240520, 1, 1000, t);
  expect_error("--data.train=" + dir + "/big.bin", "50300");
}

TEST_F(CliErrors, HeadsNotDividingChannels) {
  expect_error("--data.train=" + dir + "/good.bin --model.n_head=3", "model.n_head=3 does not divide model.n_embd=16");
}

TEST_F(CliErrors, WindowNotPositive) {
  expect_error("--data.train=" + dir + "/good.bin --model.attention=sliding --model.window=0", "model.window=0");
  expect_error("--data.train=" + dir + "/good.bin --model.attention=sliding --model.window=-4", "model.window=-4");
}

TEST_F(CliErrors, LearningRateNaN) {
  expect_error("--data.train=" + dir + "/good.bin --optim.lr=nan", "optim.lr=nan");
}

TEST_F(CliErrors, MissingDataPath) {
  expect_error("", "data.train is missing");
  expect_error("--data.train=" + dir + "/does_not_exist.bin", "does_not_exist.bin");
}

// train.device = cuda where it cannot run: a named error before training, naming why (the build
// option, or the failing CUDA call when no GPU opens); with a parallel layout, the config names it.
TEST_F(CliErrors, CudaDeviceWhereNoGpuOpens) {
  if (ms::cuda_available()) GTEST_SKIP() << "a GPU opens here: train.device=cuda is valid";
  expect_error("--data.train=" + dir + "/good.bin --train.device=cuda",
               ms::cuda_built() ? "no CUDA device opens: " : "built without MEGASCALE_WITH_CUDA");
  // NCCL moves GPU memory: asked for with train.device=cpu it is a config error.
  expect_error("--data.train=" + dir + "/good.bin --parallel.backend=nccl",
               "parallel.backend='nccl' moves GPU memory: it needs train.device='cuda'");
  expect_error("--data.train=" + dir + "/good.bin --train.device=cuda --parallel.backend=nccl --parallel.pp=2 "
               "--model.n_layer=2",
               "parallel.backend='nccl' with parallel.pp=2: the pipeline's concurrent sends and receives");
  expect_error("--data.train=" + dir + "/good.bin --train.device=gpu", "train.device");
}

TEST_F(CliErrors, UnknownConfigKey) {
  std::ofstream(dir + "/unknown.toml") << "[model]\nn_layers = 4\n";
  auto r = run_cmd(std::string(MEGASCALE_BINARY) + " train " + dir + "/unknown.toml --data.train=" + dir + "/good.bin");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("unknown config key 'model.n_layers'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unknown.toml"), std::string::npos) << r.output;
  // On the command line too.
  expect_error("--data.train=" + dir + "/good.bin --model.n_layers=4", "--model.n_layers");
}

TEST_F(CliErrors, HelpDocumentsEveryKey) {
  auto r = run_cmd(std::string(MEGASCALE_BINARY) + " train --help");
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* key : {"--model.n_layer", "--model.block", "--model.window", "--model.full_every",
                          "--optim.name", "--optim.lr", "--optim.max_trust", "--data.train", "--data.val",
                          "--train.grad_accum", "--train.eval_every", "--train.out_dir"})
    EXPECT_NE(r.output.find(key), std::string::npos) << key << " missing from --help";
}

}  // namespace
