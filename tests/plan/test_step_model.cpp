// test_step_model: the predicted step's structure, with the default (structural) constants; the
// calibrated ones are compared with publications in test_plan_calibration:
//  - the time split sums to the step, and MFU is eq. 7's FLOPs over the step at the peak;
//  - one stage has no bubble and no pipeline communication; with a negligible LM head the bubble
//    over the busiest stage's compute is Megatron's (p-1)/(v m);
//  - every overlap only helps, and helps where its communication is large: chunked TP overlap
//    <= tp-bwd <= none; decoupled <= paired send/recv; DP overlap <= none;
//  - full recomputation repeats the transformer layers, never the LM head (its time does not depend
//    on the vocabulary); pipeline scatter/gather sends 1/t of an activation;
//  - MegaScale's features (planner.md §8: parallel block, sliding window, no recomputation, TP and
//    PP overlap, FlashAttention, asynchronous data, LAMB) give a shorter step than the Megatron-LM
//    baseline for the 175B model at 256, 1,024 and 12,288 GPUs;
//  - the costs that grow with scale (scale_cost.h) are their own terms of the split and vanish where
//    they should: the straggler wait is the busiest stage's compute x cv x E[max of N normals] and 0
//    without jitter or with one device; the spine term is 0 while the data-parallel ring stays under
//    one switch set (1,024 GPUs: 16 hosts of 64) or the upper tiers lose nothing, and at 12,288 GPUs
//    (192 hosts; without DP overlap) is the ring's bandwidth term x (oversubscription / spine_eta - 1);
//  - layouts the batch or the model cannot split are named.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/model_math.h"
#include "plan/scale_cost.h"
#include "plan/step_model.h"

using namespace ms;
using namespace ms::plan;

namespace {

ModelConfig gpt175(bool megascale) {
  ModelConfig m;
  m.n_layer = 96, m.n_embd = 12288, m.n_head = 128, m.vocab_size = 64000, m.max_seq_len = 2048;
  m.block = megascale ? BlockKind::kParallel : BlockKind::kSequential;
  m.attention = megascale ? AttentionKind::kSliding : AttentionKind::kFull;
  m.window = 1024, m.full_every = 0;
  return m;
}

PlanLayout layout(bool megascale, int gpus, int batch) {
  PlanLayout l;
  l.tp = 8, l.pp = 8, l.dp = gpus / 64, l.virtual_stages = 6, l.schedule = PipelineScheduleKind::kInterleaved;
  l.micro_batch = 1, l.global_batch = batch, l.seq = 2048, l.sequence_parallel = true;
  l.recompute = megascale ? Recompute::kNone : Recompute::kSelective;
  l.overlap_tp_bwd = true, l.overlap_tp = megascale, l.overlap_pp = megascale, l.overlap_dp = true;
  l.attention = megascale ? AttentionImpl::kFlash : AttentionImpl::kUnfused;
  l.data_async = megascale, l.lamb = megascale;
  return l;
}

PlanConstants constants() {
  PlanConstants k;
  k.host_sync_s = 0.2, k.host_async_s = 0.02;
  return k;
}

TEST(StepModel, TheSplitSumsToTheStepAndMfuIsEquationSeven) {
  const ClusterDesc a100 = builtin_cluster("a100-80g");
  const ModelConfig m = gpt175(true);
  const PlanLayout l = layout(true, 256, 768);
  const StepPrediction p = predict_step(m, l, a100, constants());
  EXPECT_NEAR(p.compute + p.recompute + p.tp_exposed + p.bubble + p.pp_exposed + p.dp_exposed + p.optimizer + p.other +
                  p.straggler + p.spine,
              p.step_s, 1e-9 * p.step_s);
  GptShape s;
  s.layers = 96, s.hidden = 12288, s.heads = 128, s.seq = 2048, s.vocab = 64000;
  EXPECT_NEAR(p.mfu, megatron_flops_per_token(s) * 768 * 2048 / (p.step_s * 256 * 312e12), 1e-12);
  EXPECT_GT(p.bubble, 0);
  EXPECT_TRUE(p.memory.fits);
  std::printf("default constants, 175B MegaScale layout on 256 A100s: step %.2f s, MFU %.3f\n", p.step_s, p.mfu);
}

TEST(StepModel, BubbleFollowsTheScheduleClosedForm) {
  ModelConfig m = gpt175(false);
  m.vocab_size = 64;  // a negligible LM head and embedding: uniform stages
  PlanLayout l = layout(false, 64, 64);
  l.virtual_stages = 1, l.schedule = PipelineScheduleKind::k1F1B, l.pp = 1, l.dp = 8;
  const StepPrediction one = predict_step(m, l, builtin_cluster("a100-80g"), constants());
  EXPECT_EQ(one.bubble, 0.0);
  EXPECT_EQ(one.pp_exposed, 0.0);
  for (int v : {1, 3}) {
    l.pp = 8, l.dp = 1, l.virtual_stages = v;
    l.schedule = v > 1 ? PipelineScheduleKind::kInterleaved : PipelineScheduleKind::k1F1B;
    const StepPrediction p = predict_step(m, l, builtin_cluster("a100-80g"), constants());
    const double busiest = p.compute + p.recompute + p.tp_exposed;
    EXPECT_NEAR(p.bubble / busiest, 7.0 / (v * 64), 0.02 * 7.0 / (v * 64)) << "v " << v;
  }
}

TEST(StepModel, OverlapsOnlyHelp) {
  const ClusterDesc a100 = builtin_cluster("a100-80g");
  const ModelConfig m = gpt175(false);
  PlanLayout l = layout(false, 256, 768);
  l.overlap_tp_bwd = false;
  const double none = predict_step(m, l, a100, constants()).tp_exposed;
  l.overlap_tp_bwd = true;
  const double bwd = predict_step(m, l, a100, constants()).tp_exposed;
  l.overlap_tp = true;
  const double chunked = predict_step(m, l, a100, constants()).tp_exposed;
  EXPECT_LT(bwd, none);
  EXPECT_LT(chunked, bwd);
  l.overlap_pp = false;
  const double paired = predict_step(m, l, a100, constants()).step_s;
  l.overlap_pp = true;
  EXPECT_LE(predict_step(m, l, a100, constants()).step_s, paired);
  l.overlap_dp = false;
  const double dp_off = predict_step(m, l, a100, constants()).dp_exposed;
  l.overlap_dp = true;
  EXPECT_LT(predict_step(m, l, a100, constants()).dp_exposed, dp_off);
}

TEST(StepModel, MegaScaleIsFasterThanTheMegatronBaselineAtEveryScale) {
  const ClusterDesc a100 = builtin_cluster("a100-80g");
  for (const auto& [gpus, batch] : {std::pair{256, 768}, std::pair{1024, 768}, std::pair{12288, 6144}}) {
    const StepPrediction ms_ = predict_step(gpt175(true), layout(true, gpus, batch), a100, constants());
    const StepPrediction mg = predict_step(gpt175(false), layout(false, gpus, batch), a100, constants());
    EXPECT_LT(ms_.step_s, mg.step_s) << gpus;
    std::printf("default constants, %d GPUs: MegaScale MFU %.3f, Megatron-LM %.3f\n", gpus, ms_.mfu, mg.mfu);
  }
}

TEST(StepModel, RecomputationRepeatsTheLayersOnlyAndScatterGatherShrinksSends) {
  const ClusterDesc a100 = builtin_cluster("a100-80g");
  PlanLayout l = layout(false, 64, 64);
  l.pp = 1, l.dp = 8, l.virtual_stages = 1, l.schedule = PipelineScheduleKind::k1F1B, l.recompute = Recompute::kFull;
  ModelConfig small = gpt175(false), large = gpt175(false);
  small.vocab_size = 64, large.vocab_size = 640000;  // the head is on the only stage
  EXPECT_DOUBLE_EQ(predict_step(small, l, a100, constants()).recompute,
                   predict_step(large, l, a100, constants()).recompute);
  l = layout(false, 256, 768);
  l.sequence_parallel = false, l.overlap_pp = false;
  l.pp_scatter_gather = false;
  const double whole = predict_step(gpt175(false), l, a100, constants()).pp_exposed;
  l.pp_scatter_gather = true;
  EXPECT_LT(predict_step(gpt175(false), l, a100, constants()).pp_exposed, whole);
}

TEST(StepModel, AClustersEfficiencyTableSetsTheConstants) {
  ClusterDesc a100 = builtin_cluster("a100-80g");
  EXPECT_DOUBLE_EQ(plan_constants(a100).device.gemm_eta_inf, PlanConstants{}.device.gemm_eta_inf);
  const double base = predict_step(gpt175(true), layout(true, 256, 768), a100, plan_constants(a100)).compute;
  a100.efficiency = {{"gemm_eta_inf", 0.4}, {"launch_us", 7.0}, {"nic_half_MB", 2.0}};
  const PlanConstants k = plan_constants(a100);
  EXPECT_DOUBLE_EQ(k.device.gemm_eta_inf, 0.4);
  EXPECT_DOUBLE_EQ(k.device.launch_s, 7e-6);
  EXPECT_DOUBLE_EQ(k.nic_half_bytes, 2.0 * 1024 * 1024);
  EXPECT_GT(predict_step(gpt175(true), layout(true, 256, 768), a100, k).compute, 1.5 * base);  // GEMM-bound
}

TEST(StepModel, LayoutsTheBatchOrModelCannotSplitAreNamed) {
  const ClusterDesc a100 = builtin_cluster("a100-80g");
  PlanLayout l = layout(true, 256, 770);
  ms::testing::expect_error([&] { predict_step(gpt175(true), l, a100, constants()); }, {"global batch 770"});
  l = layout(true, 256, 768);
  l.virtual_stages = 5;
  ms::testing::expect_error([&] { predict_step(gpt175(true), l, a100, constants()); }, {"96"});
  l = layout(true, 256, 768);
  l.tp = 3;
  ms::testing::expect_error([&] { predict_step(gpt175(true), l, a100, constants()); }, {"128 heads", "tp 3"});
}

}  // namespace

namespace {

ms::plan::PipelineTimeline timeline_of(const ms::ScheduleSpec& spec, double f, double b) {
  return ms::plan::simulate_pipeline(ms::build_schedule(spec), ms::plan::PipelineCosts::uniform(spec, f, b));
}

// ZeRO-2's overlap windows, read off the schedule: one stage and one chunk give the bucketed rule
// max(0, RS - last backward) + max(0, AG - first forward); with two chunks per stage the chunk whose
// last backward ends first reduce-scatters under the other's backwards.
TEST(StepModel, ZeroTwoOverlapWindowsComeFromTheSchedule) {
  ms::ScheduleSpec one;
  one.stages = 1, one.virtual_stages = 1, one.micro_batches = 1;
  const auto t1 = timeline_of(one, 1.0, 2.0);  // forward [0, 1], backward [1, 3]
  EXPECT_NEAR(ms::plan::zero2_overlap_exposed(t1, 1, 5.0, 0.5), (5.0 - 2.0) + 0.0, 1e-12);
  EXPECT_NEAR(ms::plan::zero2_overlap_exposed(t1, 1, 1.0, 3.0), 0.0 + (3.0 - 1.0), 1e-12);
  ms::ScheduleSpec two;
  two.kind = ms::PipelineScheduleKind::kInterleaved, two.stages = 2, two.virtual_stages = 2, two.micro_batches = 4;
  const auto t2 = timeline_of(two, 1.0, 2.0);
  // A reduce-scatter as long as the whole step is exposed by at least the step minus its window.
  const double rs = t2.step_s;
  const double exposed = ms::plan::zero2_overlap_exposed(t2, 2, rs, 0.0);
  EXPECT_LT(exposed, 2 * rs);  // some of it hides under the schedule
  EXPECT_GT(exposed, rs);      // but two chunks' worth cannot
  // Gathers shorter than every first forward's end are never late.
  EXPECT_NEAR(ms::plan::zero2_overlap_exposed(t2, 2, 0.0, 0.25), 0.0, 1e-12);
}

TEST(StepModel, StragglersAndTheSpineAreTermsThatVanishWhereTheyShould) {
  ClusterDesc a100 = builtin_cluster("a100-80g");
  const ModelConfig m = gpt175(true);
  PlanConstants k = constants();
  const StepPrediction base = predict_step(m, layout(true, 12288, 6144), a100, k);
  EXPECT_EQ(base.straggler, 0.0) << "no jitter";
  EXPECT_EQ(base.spine, 0.0) << "the upper tiers lose nothing (spine_eta 1, 1:1)";
  k.straggler_cv = 0.01, k.spine_eta = 0.7;
  a100.network.oversubscription = 2.0;
  // 1,024 GPUs: the DP ring spans 16 hosts, under one switch set of 64.
  const StepPrediction small = predict_step(m, layout(true, 1024, 768), a100, k);
  EXPECT_EQ(small.spine, 0.0);
  const double busy = small.compute + small.recompute + small.tp_exposed;  // the busiest stage's compute
  EXPECT_NEAR(small.straggler, busy * 0.01 * expected_max_std_normal(1024), 1e-9 * busy);
  // 12,288 GPUs: 192 hosts; the ring runs at 0.7 / 2 of the NIC.
  const StepPrediction big = predict_step(m, layout(true, 12288, 6144), a100, k);
  EXPECT_GT(big.spine, 0.0);
  EXPECT_GT(big.straggler, small.straggler * (big.compute / small.compute) * 1.01) << "more devices, a slower slowest";
  // Without DP overlap the exposed DP is the ring's latency plus its bandwidth term; the spine term
  // is that bandwidth term times oversubscription / spine_eta - 1 (the latency is the same).
  PlanLayout flat = layout(true, 12288, 6144);
  flat.overlap_dp = false;
  const StepPrediction f = predict_step(m, flat, a100, k);
  const double latency = 6 * 2 * (192 - 1) * a100.network.inter_latency_us * 1e-6;  // v chunks x (RS + AG)
  EXPECT_NEAR(f.spine, (f.dp_exposed - latency) * (2.0 / 0.7 - 1.0), 1e-9 * f.spine);
  // One device: nothing to wait for.
  PlanLayout one = layout(true, 64, 768);
  one.tp = 1, one.pp = 1, one.dp = 1, one.virtual_stages = 1, one.schedule = PipelineScheduleKind::k1F1B;
  ModelConfig tiny = gpt175(true);
  tiny.n_layer = 2, tiny.n_embd = 1024, tiny.n_head = 16;
  EXPECT_EQ(predict_step(tiny, one, a100, k).straggler, 0.0);
}

}  // namespace

// The gradients' dtype over data parallelism (PlanLayout::grad_reduce_fp32): Megatron's fp16
// default reduces fp16 gradients, half of fp32's bytes. A non-overlapped all-reduce of GiBs over
// 32 GPUs: its bandwidth term halves, less the links' saturation (B(S) = B eta S / (S + S_half):
// a ring step's 50 MiB instead of 100 MiB runs ~1-4% slower per byte), its latency 2 (n-1) alpha stays.
TEST(StepModel, GradientsReducedInTheWeightsDtypeHalveTheDataParallelBandwidthTerm) {
  const ClusterDesc a100 = builtin_cluster("a100-80g");
  ModelConfig m = gpt175(false);
  m.n_layer = 24, m.n_embd = 2304, m.n_head = 24, m.vocab_size = 51200;
  PlanLayout l;
  l.tp = 1, l.pp = 1, l.dp = 32, l.micro_batch = 1, l.global_batch = 512, l.seq = 2048;
  l.schedule = PipelineScheduleKind::k1F1B, l.sequence_parallel = false, l.zero = 0, l.overlap_dp = false;
  l.precision = DType::kF16, l.attention = AttentionImpl::kUnfused, l.recompute = Recompute::kFull;
  const StepPrediction f32 = predict_step(m, l, a100, constants());
  l.grad_reduce_fp32 = false;
  const StepPrediction f16 = predict_step(m, l, a100, constants());
  const double latency = 2 * (32 - 1) * a100.network.inter_latency_us * 1e-6;
  const double ratio = (f32.dp_exposed - latency) / (f16.dp_exposed - latency);
  EXPECT_GT(ratio, 1.92);
  EXPECT_LT(ratio, 2.0);
  EXPECT_NEAR(f32.step_s - f16.step_s, f32.dp_exposed - f16.dp_exposed, 1e-9) << "nothing else moves";
  l.precision = DType::kF32;  // fp32 weights: fp32 gradients either way
  EXPECT_EQ(predict_step(m, l, a100, constants()).dp_exposed, f32.dp_exposed);
}
