// test_staged_equivalence: the GPU staging path of comm/staging.h inside real training, on this
// machine (no GPU: host memory stands in for GPU memory). MEGASCALE_TEST_STAGE_HOST=1 makes every
// group copy what each op reads into staging blocks, run the engine on those copies and copy the
// result back, exactly as Gloo and MPI carry GPU buffers. Truth is the same run without staging:
// ZeRO-2 (dp 2), tensor parallelism with chunked sequence-parallel regions (tp 2) and the
// interleaved pipeline (pp 2) give the same bits, since staging moves bytes and computes nothing.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/layout_runs.h"
#include "parallel/pp_runs.h"

using namespace ms::testing;

namespace {

TEST(StagedEquivalence, DpTpPpThroughStagingGiveTheSameBits) {
  LayoutRuns runs("staged_eq", pp_config());
  const std::string v = tp_variant("parallel", "sliding", "adamw");
  const std::string staged = "MEGASCALE_TEST_STAGE_HOST=1 ";
  for (const auto& [name, layout] : {std::pair<std::string, std::string>{"dp2", pp_layout(2, 1, 1, false)},
                                     {"tp2", pp_layout(1, 2, 1, false) + " --parallel.tp_chunks=2"},
                                     {"pp2", pp_layout(1, 1, 2, true)}}) {
    runs.train(launch(2), name, v + layout);
    const std::string out = runs.train(staged + launch(2), name + "_staged", v + layout);
    EXPECT_NE(out.find("every group stages its buffers"), std::string::npos) << out;
    runs.expect_same_run(name, name + "_staged", 6, 0, 0, 0, /*bit_exact=*/true);
  }
}

}  // namespace
