// test_plan_calibration: the shipped A100 constants (configs/clusters/a100-80g.toml, the built-in
// a100-80g; fitted by bench/plan_fit_table5.py and bench/plan_fit_megascale.py) against the published
// numbers they were fitted to, so a change to the model that moves a prediction away from them fails
// here and is refitted deliberately:
//  - Korthikanti et al. (MLSys'23) Table 5, eight DP-1 iteration times: within 6% each (the joint fit
//    of all 26 rows, bench/plan_validate.py's in-sample one, leaves them at RMS 2.6%, the worst the 22B
//    full-recomputation row at +5.2%: its 0.05 s of host time per step is 3.5% of a 1.42 s step);
//  - MegaScale (NSDI'24) Table 3's nine ablation rows and Table 2's visible rows (Megatron-LM and
//    MegaScale at 256-1,024 and 12,288 GPUs): within 3 MFU points each;
//  - MegaScale faster than Megatron-LM at every scale.
// MFU is eq. 7's FLOPs over the predicted step at 312 TFLOP/s, the papers' convention.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "plan/cluster_desc.h"
#include "plan/model_math.h"
#include "plan/step_model.h"

namespace {

using namespace ms::plan;

ms::ModelConfig model(int layers, int hidden, int heads, int vocab, bool parallel, bool sliding) {
  ms::ModelConfig m;
  m.n_layer = layers, m.n_embd = hidden, m.n_head = heads, m.vocab_size = vocab, m.max_seq_len = 2048;
  if (parallel) m.block = ms::BlockKind::kParallel;
  if (sliding) m.attention = ms::AttentionKind::kSliding, m.window = 1024;
  return m;
}

double predict_s(const ms::ModelConfig& m, const PlanLayout& l) {
  const ClusterDesc c = builtin_cluster("a100-80g");
  return predict_step(m, l, c, plan_constants(c)).step_s;
}

TEST(PlanCalibration, KorthikantiTable5WithinSixPercent) {
  struct Row {
    int heads, hidden, layers, pp, v, batch, mb;
    double full_s, selective_s;
  };
  const Row rows[] = {{64, 6144, 48, 1, 1, 4, 4, 1.42, 1.10},
                      {96, 12288, 96, 8, 3, 64, 1, 18.13, 13.75},
                      {128, 20480, 105, 35, 3, 280, 1, 49.05, 37.83},
                      {160, 25600, 128, 64, 1, 512, 1, 94.42, 71.49}};
  for (const Row& r : rows)
    for (const bool selective : {false, true}) {
      PlanLayout l;
      l.tp = 8, l.pp = r.pp, l.dp = 1, l.virtual_stages = r.v, l.micro_batch = r.mb, l.global_batch = r.batch;
      l.schedule = r.v > 1 ? ms::PipelineScheduleKind::kInterleaved : ms::PipelineScheduleKind::k1F1B;
      l.precision = ms::DType::kF16, l.zero = 0, l.attention = AttentionImpl::kUnfused, l.data_async = false;
      l.overlap_tp_bwd = true, l.overlap_tp = false, l.overlap_pp = false, l.overlap_dp = false;
      l.sequence_parallel = selective, l.recompute = selective ? Recompute::kSelective : Recompute::kFull;
      const double published = selective ? r.selective_s : r.full_s;
      const double s = predict_s(model(r.layers, r.hidden, r.heads, 51200, false, false), l);
      EXPECT_NEAR(s / published, 1.0, 0.06) << r.hidden << (selective ? " selective" : " full");
    }
}

// Table 3's presets (planner.md §8.4), one technique added per row.
struct Features {
  bool parallel, sliding, tp_overlap, pp_overlap, dp_overlap, flash, async, lamb;
};

double mfu(const Features& f, int gpus, int batch) {
  PlanLayout l;
  l.tp = 8, l.pp = 8, l.dp = gpus / 64, l.virtual_stages = 6, l.micro_batch = 1, l.global_batch = batch;
  l.schedule = ms::PipelineScheduleKind::kInterleaved, l.precision = ms::DType::kBF16, l.zero = 2;
  l.overlap_tp_bwd = true, l.overlap_tp = f.tp_overlap, l.overlap_pp = f.pp_overlap, l.overlap_dp = f.dp_overlap;
  l.attention = f.flash ? AttentionImpl::kFlash : AttentionImpl::kUnfused;
  l.recompute = f.flash ? Recompute::kNone : Recompute::kSelective;
  l.data_async = f.async, l.lamb = f.lamb;
  const ms::ModelConfig m = model(96, 12288, 128, 64000, f.parallel, f.sliding);
  GptShape s;
  s.layers = 96, s.hidden = 12288, s.heads = 128, s.seq = 2048, s.vocab = 64000;
  return 100 * megatron_flops_per_token(s) * batch * 2048 / predict_s(m, l) / (gpus * 312e12);
}

const Features kMegatron{false, false, false, false, false, false, false, false};
const Features kMegaScale{true, true, true, true, true, true, true, true};

TEST(PlanCalibration, MegaScaleTable3WithinThreePoints) {
  const Features rows[] = {kMegatron,
                           {true, false, false, false, false, false, false, false},
                           {true, true, false, false, false, false, false, false},
                           {true, true, true, false, false, false, false, false},
                           {true, true, true, true, false, false, false, false},
                           {true, true, true, true, true, false, false, false},
                           {true, true, true, true, true, true, false, false},
                           {true, true, true, true, true, true, true, false}};
  const double published[] = {47.7, 52.3, 53.3, 55.5, 58.0, 59.5, 61.2, 62.3};
  for (int i = 0; i < 8; i++) EXPECT_NEAR(mfu(rows[i], 256, 256), published[i], 3.0) << "row " << i + 1;
  EXPECT_NEAR(mfu(kMegaScale, 256, 768), 65.3, 3.0) << "row 9";
}

TEST(PlanCalibration, MegaScaleTable2WithinThreePointsAndFasterAtEveryScale) {
  struct Row {
    int gpus, batch;
    double megatron, megascale, megascale_tolerance;
  };
  const Row rows[] = {{256, 768, 53.0, 65.3, 3.0},
                      {512, 768, 49.9, 63.5, 3.0},
                      {768, 768, 46.7, 61.3, 3.0},
                      {1024, 768, 44.7, 59.0, 3.0},
                      {12288, 6144, 41.2, 55.2, 3.0}};
  for (const Row& r : rows) {
    const double mg = mfu(kMegatron, r.gpus, r.batch), ms_ = mfu(kMegaScale, r.gpus, r.batch);
    EXPECT_NEAR(mg, r.megatron, 3.0) << r.gpus << " GPUs, Megatron-LM";
    EXPECT_NEAR(ms_, r.megascale, r.megascale_tolerance) << r.gpus << " GPUs, MegaScale";
    EXPECT_GT(ms_, mg) << r.gpus;
  }
}

}  // namespace
