// test_llama_layouts: a Llama-style model (llama_runs.h: RMSNorm, RoPE, SwiGLU, grouped-query
// attention, untied LM head) on every parallel axis against the single-process trainer, as real
// processes (`megascale launch`, Gloo): tp 2 (query and key/value heads split), pp 2 with 1F1B and
// interleaved, dp 2 with ZeRO-2, and 2x2x2, within the tensor-parallel suite's bounds (per-step
// losses 1e-5 relative, final weights 3e-5 relative L2; tp_runs.h says why they are not bit-exact).
// Activation recomputation (selective, full in groups of 2 layers) gives the bits of no
// recomputation, on one process and on each layout. A tensor-parallel degree that does not divide
// the key/value heads is a named error before training; Llama checkpoints resume exactly.
// test_slow_llama_layouts runs more variants (parallel block, LAMB, bf16) on every layout.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "ckpt/ckpt_runs.h"
#include "common/layout_runs.h"
#include "common/test_util.h"
#include "parallel/llama_runs.h"

using namespace ms::testing;

namespace {

std::unique_ptr<LayoutRuns> g;

class LlamaLayouts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { g = std::make_unique<LayoutRuns>("llama_layouts", llama_config()); }
  static void TearDownTestSuite() { g.reset(); }
  static void expect_follows(const std::string& ref, const std::string& got) {
    g->expect_same_run(ref, got, 6, kPpLossRel, kPpWeightRel, -1);
  }
  static void expect_same_bits(const std::string& ref, const std::string& got) {
    g->expect_same_run(ref, got, 6, 0, 0, 0, /*bit_exact=*/true);
  }
};

const std::string kVariant = tp_variant("sequential", "sliding", "adamw");
const std::string kFull = " --model.recompute=full --model.recompute_every=2";
const std::string kSelective = " --model.recompute=selective";

TEST_F(LlamaLayouts, EveryAxisMatchesTheSingleProcess) {
  g->train(megascale_bin(), "ref", kVariant);
  const std::string tp = g->train(launch(2), "tp2", kVariant + pp_layout(1, 2, 1, false));
  EXPECT_NE(tp.find("tensor parallel:"), std::string::npos) << tp;
  expect_follows("ref", "tp2");
  g->train(launch(2), "pp2", kVariant + pp_layout(1, 1, 2, false));
  expect_follows("ref", "pp2");
  g->train(launch(2), "pp2_int", kVariant + pp_layout(1, 1, 2, true));
  expect_follows("ref", "pp2_int");
  g->train(launch(2), "dp2", kVariant + pp_layout(2, 1, 1, false));
  expect_follows("ref", "dp2");
  g->train(launch(8), "l222", kVariant + pp_layout(2, 2, 2, false));
  expect_follows("ref", "l222");
}

TEST_F(LlamaLayouts, RecomputationGivesTheSameBitsOnEveryLayout) {
  g->train(megascale_bin(), "none", kVariant);
  g->train(megascale_bin(), "selective", kVariant + kSelective);
  expect_same_bits("none", "selective");
  g->train(megascale_bin(), "full", kVariant + kFull);
  expect_same_bits("none", "full");
  // Tensor parallel: the recomputed forward runs its regions' collectives again.
  g->train(launch(2), "tp2_none", kVariant + pp_layout(1, 2, 1, false));
  g->train(launch(2), "tp2_full", kVariant + pp_layout(1, 2, 1, false) + kFull);
  expect_same_bits("tp2_none", "tp2_full");
  // Pipeline: several micro-batches in flight share the recompute workspace.
  g->train(launch(2), "pp2_none", kVariant + pp_layout(1, 1, 2, true));
  g->train(launch(2), "pp2_full", kVariant + pp_layout(1, 1, 2, true) + kFull);
  g->train(launch(2), "pp2_sel", kVariant + pp_layout(1, 1, 2, true) + kSelective);
  expect_same_bits("pp2_none", "pp2_full");
  expect_same_bits("pp2_none", "pp2_sel");
  // ZeRO-2 reduces gradients as backward finishes them: the recomputation sits between.
  g->train(launch(2), "dp2_none", kVariant + pp_layout(2, 1, 1, false));
  g->train(launch(2), "dp2_full", kVariant + pp_layout(2, 1, 1, false) + " --model.recompute=full");
  expect_same_bits("dp2_none", "dp2_full");
}

TEST_F(LlamaLayouts, TensorParallelMustDivideTheKeyValueHeads) {
  const CmdResult r = run_cmd(launch(2) + " train " + g->dir() + "/cfg.toml --train.out_dir=" + g->dir() +
                              "/bad --model.n_kv_head=1 --parallel.tp=2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("parallel.tp=2 does not divide the key/value heads model.n_kv_head=1"), std::string::npos)
      << r.output;
}

TEST(LlamaCheckpoints, Exact2x2x2Resume) {
  exact_resume(launch(8), pp_layout(2, 2, 2, false) + kVariant, "fp32", "", llama_config());
}

// A 2x2x2 checkpoint (q/k/v and gate/up split over tp, the untied head on the last stage) resumed on
// one process and on tp 2: the source layout's losses within its tolerance.
TEST(LlamaCheckpoints, ReshardedResumeFollowsTheSourceRun) {
  CkptRuns runs("llama_reshard", llama_config());
  const std::string src = pp_layout(2, 2, 2, false) + kVariant;
  runs.train(launch(8), "src", src);
  const CmdResult saved = runs.run(launch(8), "ck", src + " --train.exit_after=3");
  ASSERT_EQ(saved.code, 0) << saved.output;
  const std::string path = " --train.resume=" + runs.ckpt("ck", 3);
  struct Target { std::string name, prefix, layout; };
  for (const Target& t : {Target{"one", megascale_bin(), kVariant},
                          Target{"tp2", launch(2), pp_layout(1, 2, 1, false) + kVariant}}) {
    runs.train(t.prefix, t.name, t.layout + path);
    const auto want = runs.step_losses("src"), got = runs.step_losses(t.name);
    EXPECT_EQ(got.size(), 3u) << t.name << ": steps 4..6 only";
    for (int s = 4; s <= 6; s++) {
      ASSERT_TRUE(got.count(s)) << t.name << " step " << s;
      EXPECT_LE(std::fabs(got.at(s) - want.at(s)) / want.at(s), kPpLossRel) << t.name << " step " << s;
    }
  }
}

}  // namespace
