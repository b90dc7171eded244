// test_train_signals: `megascale train` told to stop by SIGHUP (its terminal closed) does what
// SIGTERM does: it saves a checkpoint at the next step boundary and exits 0 (SIGHUP's default would
// end it at once, losing every step since the last save).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/processes.h"
#include "common/test_util.h"
#include "data/token_shard.h"

namespace {

class TrainSignals : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_train_signals"; }
};

// Lines of the run's log.jsonl that record a step's loss.
int steps_logged(const std::string& log) {
  std::ifstream f(log);
  int n = 0;
  for (std::string line; std::getline(f, line);) n += line.find("\"loss\"") != std::string::npos;
  return n;
}

}  // namespace

TEST_F(TrainSignals, SighupSavesAtTheStepBoundaryAndExitsZero) {
  std::vector<uint16_t> t(4000);
  for (size_t i = 0; i < t.size(); i++) t[i] = static_cast<uint16_t>((i * 7 + 3) % 300);
  ms::write_token_shard(path("train.bin"), t);
  std::ofstream(path("cfg.toml")) << "[model]\nn_layer = 1\nn_head = 2\nn_embd = 32\nvocab_size = 300\n"
                                     "max_seq_len = 8\n[train]\nsteps = 100000\nbatch_size = 2\nseq_len = 8\n"
                                     "eval_every = 0\nsample_tokens = 0\nthreads = 1\nprogress = \"lines\"\nout_dir = \""
                                  << path("run") << "\"\n[data]\ntrain = \"" << path("train.bin") << "\"\nval = \"\"\n";
  const auto start = ms::testing::Clock::now();
  ms::testing::Proc p = ms::testing::spawn({MEGASCALE_BINARY, "train", path("cfg.toml")}, {}, path("train.out"));
  ms::testing::wait_all({&p}, start, 120, [&] { return steps_logged(path("run/log.jsonl")) >= 2; });
  ASSERT_FALSE(p.done) << "the run ended before it was told to stop:\n" << p.output();
  ::kill(p.pid, SIGHUP);
  ms::testing::wait_all({&p}, start, 120);
  EXPECT_EQ(p.code, 0) << p.output();
  EXPECT_TRUE(std::filesystem::exists(path("run/checkpoints/latest"))) << p.output();
}
