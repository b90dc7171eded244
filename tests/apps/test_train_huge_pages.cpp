// test_train_huge_pages: `train.huge_pages = true` puts the model's large buffers on transparent
// huge pages (the run log says how many MiB took the advice; where the kernel has no transparent
// huge pages, that none did), and it changes no number: the losses equal, bit for bit, those of the
// same run on 4 KiB pages.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "data/token_shard.h"

namespace {

class TrainHugePages : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_train_huge"; }
};

std::string read_all(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The "loss" fields of a run's log.jsonl, as written (exact text: bit-identical floats print alike).
std::vector<std::string> losses(const std::string& log) {
  std::vector<std::string> out;
  std::ifstream f(log);
  for (std::string line; std::getline(f, line);) {
    const size_t at = line.find("\"loss\":");
    if (at != std::string::npos && line.find("\"step_ms\"") != std::string::npos)
      out.push_back(line.substr(at, line.find(',', at) - at));
  }
  return out;
}


}  // namespace

TEST_F(TrainHugePages, BuffersTakeTheAdviceAndTheLossesAreUnchanged) {
  std::vector<uint16_t> t(20000);
  for (size_t i = 0; i < t.size(); i++) t[i] = static_cast<uint16_t>((i * 7919 + 3) % 8192);
  ms::write_token_shard(path("train.bin"), t);
  // vocab 8192 x C 128: the embedding alone is 4 MiB, so parameters, gradients and moments are
  // buffers of 2 MiB and more.
  std::ofstream(path("cfg.toml")) << "[model]\nn_layer = 1\nn_head = 2\nn_embd = 128\nvocab_size = 8192\n"
                                     "max_seq_len = 16\n[train]\nsteps = 3\nbatch_size = 2\nseq_len = 16\n"
                                     "eval_every = 0\nsample_tokens = 0\nthreads = 1\nprogress = \"lines\"\n"
                                     "[data]\ntrain = \"" << path("train.bin") << "\"\nval = \"\"\n";
  std::vector<std::string> ref;
  for (const bool huge : {false, true}) {
    const std::string out = path(huge ? "huge" : "plain");
    const auto r = ms::testing::run_cmd(std::string(MEGASCALE_BINARY) + " train " + path("cfg.toml") +
                                        " --train.out_dir=" + out + " --train.huge_pages=" + (huge ? "true" : "false") +
                                        " 2>&1");
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string log = read_all(out + "/log.jsonl");
    const bool thp = ms::testing::kernel_takes_huge_page_advice();
    if (!huge) {
      EXPECT_EQ(log.find("train.huge_pages"), std::string::npos) << log;
      ref = losses(out + "/log.jsonl");
      ASSERT_EQ(ref.size(), 3u) << log;
      continue;
    }
    if (thp)
      EXPECT_NE(log.find("MiB of buffers advised onto transparent huge pages"), std::string::npos) << log;
    else
      EXPECT_NE(log.find("no buffer took the advice"), std::string::npos) << log;
    EXPECT_EQ(losses(out + "/log.jsonl"), ref) << "huge pages changed a loss";
  }
}
