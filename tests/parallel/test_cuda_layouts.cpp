// test_cuda_layouts: every parallel axis on GPU memory (label gpu; skips when no CUDA device opens,
// as on CI). Several processes share the one GPU over Gloo, which carries device buffers through
// pinned host staging (comm/staging.h; NCCL refuses two ranks on one GPU before 2.30). Truth is
// the single-process GPU run, itself checked against the CPU run (the oracle of every GPU test):
//  - dp 2 (ZeRO-2), tp 2 (sequence parallel, chunked regions), pp 2 (1F1B), pp 2 interleaved and
//    dp 2 x tp 2 reproduce it within the CPU layout-equivalence tolerances (pp_runs.h: losses 1e-5
//    relative, weights 3e-5 relative L2: only the association of fp32 sums differs);
//  - ordering: dp 2 with every reducing backward held back 30 ms on the GPU
//    (MEGASCALE_TEST_DELAY_BACKWARD_MS: the gradients are written long after the host asked for
//    their reduce-scatter) gives the same bits as without: the collectives wait on events.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "base/device.h"
#include "common/layout_runs.h"
#include "common/test_util.h"
#include "parallel/pp_runs.h"

using namespace ms;
using namespace ms::testing;

namespace {

std::unique_ptr<LayoutRuns> g;

class CudaLayouts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_available()) g = std::make_unique<LayoutRuns>("cuda_layouts", pp_config());
  }
  static void TearDownTestSuite() { g.reset(); }
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
  static constexpr const char* kGpu = " --train.device=cuda --parallel.backend=gloo";
};

TEST_F(CudaLayouts, EveryAxisOverStagedGlooMatchesTheSingleProcessGpuRun) {
  const std::string v = tp_variant("parallel", "sliding", "adamw");
  g->train(megascale_bin(), "cpu", v);
  g->train(megascale_bin(), "gpu", v + kGpu);
  // The oracle: one GPU against the CPU (issue 24's fp32 bars).
  g->expect_same_run("cpu", "gpu", 6, 1e-5, 3e-5, -1);
  g->train(launch(2), "dp2", v + kGpu + pp_layout(2, 1, 1, false));
  g->expect_same_run("gpu", "dp2", 6, kPpLossRel, kPpWeightRel, -1);
  g->train(launch(2), "tp2", v + kGpu + pp_layout(1, 2, 1, false) + " --parallel.tp_chunks=2");
  g->expect_same_run("gpu", "tp2", 6, kPpLossRel, kPpWeightRel, -1);
  g->train(launch(2), "pp2", v + kGpu + pp_layout(1, 1, 2, false));
  g->expect_same_run("gpu", "pp2", 6, kPpLossRel, kPpWeightRel, -1);
  g->train(launch(2), "pp2_int", v + kGpu + pp_layout(1, 1, 2, true));
  g->expect_same_run("gpu", "pp2_int", 6, kPpLossRel, kPpWeightRel, -1);
  g->train(launch(4), "dp2tp2", v + kGpu + pp_layout(2, 2, 1, false));
  g->expect_same_run("gpu", "dp2tp2", 6, kPpLossRel, kPpWeightRel, -1);
}

TEST_F(CudaLayouts, CollectivesWaitOnEventsNotOnTheHost) {
  const std::string v = tp_variant("sequential", "full", "adamw") + kGpu + pp_layout(2, 1, 1, false);
  g->train(launch(2), "dp2_plain", v);
  g->train("MEGASCALE_TEST_DELAY_BACKWARD_MS=30 " + launch(2), "dp2_delayed", v);
  g->expect_same_run("dp2_plain", "dp2_delayed", 6, 0, 0, 0, /*bit_exact=*/true);
}

}  // namespace
