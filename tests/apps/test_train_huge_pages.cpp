// test_train_huge_pages: `train.huge_pages = true` puts the model's large buffers on transparent
// huge pages (the run log says how many MiB took the advice; where the kernel has no transparent
// huge pages, that none did), and it changes no number: the losses equal, bit for bit, those of the
// same run on 4 KiB pages.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/layout_runs.h"
#include "common/test_util.h"

// vocab 8192 x C 128: the embedding alone is 4 MiB, so parameters, gradients and moments are
// buffers of 2 MiB and more.
TEST(TrainHugePages, BuffersTakeTheAdviceAndTheLossesAreUnchanged) {
  ms::testing::LayoutRuns runs("ms_train_huge",
                               "[model]\nn_layer = 1\nn_head = 2\nn_embd = 128\nvocab_size = 8192\nmax_seq_len = 16\n"
                               "[train]\nsteps = 3\nbatch_size = 2\nseq_len = 16\neval_every = 0\nsample_tokens = 0\n"
                               "threads = 1\nprogress = \"lines\"\n");
  const std::string bin = ms::testing::megascale_bin();
  runs.train(bin, "plain", "--train.huge_pages=false");
  runs.train(bin, "huge", "--train.huge_pages=true");
  EXPECT_EQ(ms::testing::slurp(runs.dir() + "/plain/log.jsonl").find("train.huge_pages"), std::string::npos);
  const std::string log = ms::testing::slurp(runs.dir() + "/huge/log.jsonl");
  if (ms::testing::kernel_takes_huge_page_advice())
    EXPECT_NE(log.find("MiB of buffers advised onto transparent huge pages"), std::string::npos) << log;
  else
    EXPECT_NE(log.find("no buffer took the advice"), std::string::npos) << log;
  const std::vector<double> ref = runs.losses("plain");
  ASSERT_EQ(ref.size(), 3u);
  EXPECT_EQ(runs.losses("huge"), ref) << "huge pages changed a loss";
}
