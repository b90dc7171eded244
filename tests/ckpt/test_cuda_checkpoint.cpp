// test_cuda_checkpoint: two-stage checkpoints of state in GPU memory (label gpu; skips when no CUDA
// device opens, as on CI). Stage 1 copies the state on the checkpointer's own CUDA stream into
// page-locked snapshot buffers, after an event recorded when the save was asked for, while the
// next step's kernels run.
//  - Exact resume, one GPU and dp 2 (ZeRO-2 shards in GPU memory, staged Gloo, two processes on
//    the GPU): a run stopped after step 3 and resumed reproduces the uninterrupted run's losses and
//    final weights bit for bit; so does a resume from step 2's save, whose copy ran beside step 3's
//    forward and backward (a copy not ordered after the update would hold other bits).
//  - The stall, measured (printed as [measured], never asserted: no timing in a pass/fail test): a
//    GPT of ~45M parameters saving every 2 steps, the asynchronous save (stage 1 beside the next
//    step) against a synchronous one (checkpoint.async=false: the training thread persists it).
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "base/device.h"
#include "ckpt/ckpt_runs.h"
#include "common/layout_runs.h"
#include "common/test_util.h"
#include "parallel/pp_runs.h"

using namespace ms;
using namespace ms::testing;

namespace {

constexpr const char* kGpu = " --train.device=cuda --parallel.backend=gloo";

class CudaCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

// ckpt_runs.h's exact resume, the state in GPU memory.
TEST_F(CudaCheckpoint, ExactResumeOneGpu) { exact_resume(megascale_bin(), kGpu, "fp32"); }

TEST_F(CudaCheckpoint, ExactResumeDp2SharingTheGpu) {
  exact_resume(launch(2), std::string(kGpu) + pp_layout(2, 1, 1, false), "fp32");
}

// Sum of the milliseconds in every match of `re` (first group) in `text`.
double sum_ms(const std::string& text, const std::regex& re) {
  double s = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    s += std::stod((*it)[1].str());
  return s;
}

TEST_F(CudaCheckpoint, Stage1StallAgainstASynchronousSaveMeasured) {
  CkptRuns runs("cuda_ckpt_stall");
  const std::string model =
      " --model.n_layer=8 --model.n_embd=512 --model.n_head=8 --model.vocab_size=50257 --model.max_seq_len=256"
      " --train.seq_len=256 --train.batch_size=4 --train.global_batch=8 --train.steps=8 --checkpoint.every=2"
      " --checkpoint.keep_last=1";
  const std::regex stage1(R"(stage 1 stopped training for ([0-9.]+) ms)");
  const std::regex waited(R"(the optimizer waited ([0-9.]+) ms)");
  double stall[2] = {0, 0};
  for (int sync = 0; sync < 2; sync++) {
    const std::string name = sync ? "sync" : "async";
    const CmdResult r = runs.run(megascale_bin(), name, std::string(kGpu) + model +
                                 (sync ? " --checkpoint.async=false" : ""));
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(runs.latest(name), "step-00000008") << r.output;
    stall[sync] = sum_ms(r.output, stage1) + sum_ms(r.output, waited);
  }
  std::printf("[measured] checkpoint of state in GPU memory, 4 saves of a 51M-parameter model: the training thread "
              "stopped %.1f ms with the two-stage save (stage 1 on the copier's stream) against %.1f ms with a "
              "synchronous save (%.1fx)\n", stall[0], stall[1], stall[1] / std::max(stall[0], 1e-3));
}

}  // namespace
