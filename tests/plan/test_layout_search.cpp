// test_layout_search: the search (planner.md §4.6) returns only what the trainer could run and
// fits; it is never slower than the planner's own prediction of a layout inside the space (the
// published MegaScale layout for 175B on 256 GPUs); re-planning the returned layout gives the same
// time; fixed fields stay fixed; nothing fitting is an error naming the largest term.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/layout_search.h"
#include "plan/runnable.h"

using namespace ms;
using namespace ms::plan;

namespace {

ModelConfig gpt175() {
  ModelConfig m;
  m.n_layer = 96, m.n_embd = 12288, m.n_head = 128, m.vocab_size = 64000, m.max_seq_len = 2048;
  m.block = BlockKind::kParallel, m.attention = AttentionKind::kSliding, m.window = 1024, m.full_every = 0;
  return m;
}

PlanLayout features() {
  PlanLayout l;
  l.global_batch = 768, l.seq = 2048, l.sequence_parallel = true, l.overlap_tp = true, l.overlap_pp = true;
  l.overlap_dp = true, l.attention = AttentionImpl::kFlash, l.lamb = true;
  return l;
}

TEST(LayoutSearch, NeverSlowerThanTheMegaScaleLayoutAndReplansTheSame) {
  const ClusterDesc a100 = builtin_cluster("a100-80g");
  SearchSpace s;
  s.gpus = 256, s.fixed = features();
  s.micro_batches = {1, 2};
  const SearchResult r = search_layouts(gpt175(), s, a100, PlanConstants{}, 3);
  ASSERT_EQ(r.best.size(), 3u);
  EXPECT_GT(r.fitting, 0);
  EXPECT_LT(r.fitting, r.candidates);  // some layouts (e.g. t = 1, p = 1) cannot fit
  PlanLayout published = features();
  published.tp = 8, published.pp = 8, published.dp = 4, published.virtual_stages = 6, published.micro_batch = 1;
  published.schedule = PipelineScheduleKind::kInterleaved;
  const double mine = predict_step(gpt175(), published, a100, PlanConstants{}).step_s;
  const auto& [best, pred] = r.best.front();
  EXPECT_LE(pred.step_s, mine);
  EXPECT_LE(r.best[0].second.step_s, r.best[1].second.step_s);
  EXPECT_LE(r.best[1].second.step_s, r.best[2].second.step_s);
  EXPECT_EQ(predict_step(gpt175(), best, a100, PlanConstants{}).step_s, pred.step_s);
  EXPECT_TRUE(pred.memory.fits);
  EXPECT_EQ(best.tp * best.pp * best.dp, 256);
  EXPECT_LE(best.tp, 8);
  EXPECT_EQ(768 % (best.dp * best.micro_batch), 0);
}

TEST(LayoutSearch, FixedFieldsStayFixed) {
  SearchSpace s;
  s.gpus = 256, s.fixed = features(), s.tp = 8, s.pp = 8, s.micro_batch = 1;
  s.search_recompute = false;
  const SearchResult r = search_layouts(gpt175(), s, builtin_cluster("a100-80g"), PlanConstants{}, 1);
  EXPECT_EQ(r.best.front().first.tp, 8);
  EXPECT_EQ(r.best.front().first.pp, 8);
  EXPECT_EQ(r.best.front().first.micro_batch, 1);
  EXPECT_EQ(r.best.front().first.recompute, Recompute::kNone);
}

TEST(LayoutSearch, NothingFittingIsNamed) {
  ClusterDesc small = builtin_cluster("a100-80g");
  small.device.memory_gib = 1;
  SearchSpace s;
  s.gpus = 8, s.fixed = features();
  ms::testing::expect_error([&] { search_layouts(gpt175(), s, small, PlanConstants{}, 1); },
                            {"none of the", "fits in 1 GiB", "most of it"});
}

}  // namespace

// Only layouts the trainer runs: a Llama-style model with 2 key/value heads cannot be split over
// more than 2 tensor-parallel ranks (the trainer's validation refuses it by name), so the search
// counts those layouts as refused and proposes none of them; each proposal passes the trainer's own
// Config::validate and carries the overrides that run it.
TEST(LayoutSearch, ProposesOnlyWhatTheTrainerRuns) {
  ModelConfig m;
  m.preset = ModelPreset::kLlama;
  m.apply_preset();
  m.n_layer = 32, m.n_embd = 4096, m.n_head = 32, m.n_kv_head = 2, m.ffn_hidden = 14336, m.vocab_size = 32000;
  m.max_seq_len = 4096;
  PlanLayout f = features();
  f.seq = 4096, f.global_batch = 256, f.lamb = false;
  SearchSpace s;
  s.gpus = 64, s.fixed = f, s.micro_batches = {1, 2};
  const SearchResult r = search_layouts(m, s, builtin_cluster("a100-80g"), PlanConstants{}, 5);
  EXPECT_GT(r.refused, 0) << "tp = 4 and 8 split 2 key/value heads";
  ASSERT_FALSE(r.best.empty());
  for (const auto& [l, pred] : r.best) {
    EXPECT_LE(l.tp, 2);
    EXPECT_EQ(trainer_refusal(m, l), "");
    const std::string o = trainer_overrides(l);
    EXPECT_NE(o.find("--parallel.tp=" + std::to_string(l.tp)), std::string::npos) << o;
    EXPECT_NE(o.find("--model.recompute="), std::string::npos) << o;
  }
  PlanLayout bad = r.best.front().first;
  bad.tp = 4, bad.dp = r.best.front().first.dp * r.best.front().first.tp / 4;
  EXPECT_NE(trainer_refusal(m, bad).find("does not divide the key/value heads"), std::string::npos);
}
