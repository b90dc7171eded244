// test_zero_dp1: the ZeRO-2 machinery at data-parallel size 1, in one process, against the
// single-process optimizer. `megascale train` never runs this (at world size 1 apps/train_run.cpp
// creates no world and Trainer creates ZeRO only for a group larger than 1), so the launched
// dp = 1 runs of test_dp_equivalence cannot tell whether ZeRO's own bookkeeping is right; this can.
// Over a one-rank communicator (comm/self_backend.h: reduce-scatter and all-gather are copies run
// on the communication thread) every gradient reduction is the identity, so what is left is ZeRO's
// code: the bucket layout (several buckets, padded and staged ones), the grad-ready hook that
// starts each bucket's reduce-scatter during backward, the shard buffers and tensor views, the
// sharded optimizer, the all-gather back into the model and the param-wait hook of the next
// forward. Each step is driven exactly as Trainer::train_step drives either path.
// Truth: the single-process path. Losses are bit-identical at every step (identical weights in,
// identical forward). With clipping off (grad_clip = 0) AdamW's update is elementwise, so the
// weights are bit-identical after every step. The gradient norm is a sum of per-tensor partial
// sums under ZeRO (grad_norm.h): within 1e-12 relative (measured ~7e-16). With clipping on, the
// clip scale comes from that norm, and LAMB's per-tensor norms are summed piece by piece, so those
// cases may differ by rounding: weights within 1e-6 relative L2 (measured: bit-identical too, in
// all four cases, over 6 steps that move the weights by > 1e-3 relative).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "comm/self_backend.h"
#include "common/test_util.h"
#include "config/config.h"
#include "model/gpt.h"
#include "optim/decay_policy.h"
#include "optim/grad_norm.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "parallel/dp/zero_dp.h"

using namespace ms;

namespace {

struct Case {
  const char* optimizer;
  bool overlap;
  float grad_clip;
};

class ZeroDp1 : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroDp1, FollowsTheSingleProcessOptimizer) {
  const Case c = GetParam();
  ms::testing::with_threads(1, [&] {
    Config cfg;
    cfg.model.n_layer = 2; cfg.model.n_embd = 64; cfg.model.n_head = 4;
    cfg.model.vocab_size = 300; cfg.model.max_seq_len = 32;
    cfg.train.batch_size = 2; cfg.train.seq_len = 32; cfg.train.grad_accum = 2; cfg.train.steps = 6;
    cfg.optim.name = *ms::parse_config_enum<ms::OptimizerKind>(c.optimizer); cfg.optim.lr = 1e-2f; cfg.optim.min_lr = 1e-3f; cfg.optim.warmup_steps = 2;
    cfg.optim.grad_clip = c.grad_clip;
    cfg.parallel.bucket_mb = 0.02f;
    cfg.parallel.overlap = c.overlap;
    cfg.data.train = "unused";
    cfg.validate();
    const int B = cfg.train.batch_size, T = cfg.train.seq_len, A = cfg.train.grad_accum, N = B * T;
    GPT ref(cfg.model, B, T), zm(cfg.model, B, T);
    ref.init_weights(7);
    zm.init_weights(7);
    Optimizer opt(cfg.optim, optimizer_tensors(ref.param_specs(), cfg.optim), ref.num_params());
    auto self = make_self_communicator("dp", 0, std::chrono::milliseconds(60000));
    ASSERT_EQ(self->size(), 1);
    ZeroDataParallel zero(zm, *self, cfg.parallel, cfg.optim);
    ASSERT_GE(zero.layout().buckets().size(), 3u) << "one bucket would not exercise the bucketing";
    const LrSchedule sched{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps, cfg.train.steps};
    std::vector<int> in(N), tg(N);
    ms::testing::TestRng rng(11);
    double worst_norm = 0;
    int clipped = 0;
    for (int step = 0; step < cfg.train.steps; step++) {
      ref.zero_grad();
      zm.zero_grad();
      double la = 0, lb = 0;
      for (int a = 0; a < A; a++) {
        for (int i = 0; i < N; i++) {
          in[i] = static_cast<int>(rng.next() % 300);
          tg[i] = (in[i] * 7 + 3) % 300;  // learnable
        }
        la += ref.forward(in.data(), tg.data(), B, T, 1.0f / (N * A));
        ref.backward();
        lb += zm.forward(in.data(), tg.data(), B, T, 1.0f / (N * A));
        zero.arm_backward(a == A - 1);
        zm.backward();
      }
      EXPECT_EQ(la, lb) << "step " << step + 1 << ": the forward of ZeRO's gathered weights differs";
      EXPECT_EQ(zero.sum_across_ranks(lb), lb);
      const double na = std::sqrt(grad_sq_sum(ref.grads(), ref.num_params()));
      zero.finish_grad_reduce_scatter();
      const double nb = std::sqrt(zero.grad_sq_sum());
      worst_norm = std::max(worst_norm, std::fabs(nb - na) / na);
      EXPECT_NEAR(nb, na, 1e-12 * na) << "step " << step + 1;
      clipped += clip_scale(na, cfg.optim.grad_clip) < 1.0f;
      const float lr = sched.at(step);
      opt.step(ref.params(), ref.grads(), lr, clip_scale(na, cfg.optim.grad_clip));
      zero.optimizer_step(lr, clip_scale(nb, cfg.optim.grad_clip));
      zero.start_param_all_gather();
    }
    zero.finish_param_all_gather();
    const GPT& cz = zm;
    const GPT& cr = ref;
    double num = 0, den = 0, maxd = 0;
    size_t differ = 0;
    for (size_t i = 0; i < cr.num_params(); i++) {
      const double d = static_cast<double>(cz.params()[i]) - cr.params()[i];
      num += d * d;
      den += static_cast<double>(cr.params()[i]) * cr.params()[i];
      maxd = std::max(maxd, std::fabs(d));
      differ += d != 0;
    }
    const double rel = std::sqrt(num / den);
    std::printf("%s overlap=%d clip=%g (%d steps clipped): %zu of %zu weights differ, max |dw| %.3g, relative L2 %.3g; "
                "norm %.3g\n", c.optimizer, c.overlap, c.grad_clip, clipped, differ, cr.num_params(), maxd, rel, worst_norm);
    if (c.grad_clip > 0) {
      EXPECT_GT(clipped, 0) << "clipping never acted: the clipped case is not exercised";
    }
    if (std::string(c.optimizer) == "adamw" && c.grad_clip == 0.0f) {
      EXPECT_EQ(differ, 0u) << "AdamW without clipping is elementwise: ZeRO at dp = 1 must be bit-identical";
    }
    EXPECT_LE(rel, 1e-6);
    // The comparison is not vacuous: training moved the weights far more than the tolerance.
    GPT init(cfg.model, B, T);
    init.init_weights(7);
    const GPT& ci = init;
    double moved = 0;
    for (size_t i = 0; i < cr.num_params(); i++)
      moved += (static_cast<double>(cr.params()[i]) - ci.params()[i]) * (static_cast<double>(cr.params()[i]) - ci.params()[i]);
    EXPECT_GT(std::sqrt(moved / den), 1e3 * 1e-6) << "the weights barely moved";
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, ZeroDp1,
                         ::testing::Values(Case{"adamw", true, 0.0f}, Case{"adamw", false, 0.0f},
                                           Case{"adamw", true, 1.0f}, Case{"lamb", true, 1.0f}),
                         [](const auto& info) {
                           return std::string(info.param.optimizer) + (info.param.overlap ? "_overlap" : "_no_overlap") +
                                  (info.param.grad_clip > 0 ? "_clip" : "_noclip");
                         });

}  // namespace
