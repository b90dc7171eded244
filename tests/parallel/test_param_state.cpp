// test_param_state: the ParamState contract (parallel/param_state.h), for both owners of a chunk's
// state, driven only through the interface:
//  - LocalParamState follows the plain optimizer step by step, bit for bit (the reference: a second
//    model with its own Optimizer, the gradient cleared by zero_grad — the separate passes the
//    fused update replaces);
//  - ZeroDataParallel over a one-rank group follows LocalParamState bit for bit through the same
//    calls (one rank's shard is the whole buffer, reordered into buckets);
//  - the state runs a checkpoint saves cover every element of every tensor exactly once, and hold
//    what load_state put there (weights, both moments, step), for both owners;
//  - reset_from_model is the constructor's state: the model's weights, zero moments, no step.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "comm/self_backend.h"
#include "common/test_util.h"
#include "config/config.h"
#include "model/gpt.h"
#include "optim/decay_policy.h"
#include "optim/grad_norm.h"
#include "optim/optimizer.h"
#include "parallel/dp/zero_dp.h"
#include "parallel/local_param_state.h"

using namespace ms;

namespace {

Config small_config(const char* optimizer) {
  Config cfg;
  cfg.model.n_layer = 2; cfg.model.n_embd = 64; cfg.model.n_head = 4;
  cfg.model.vocab_size = 300; cfg.model.max_seq_len = 32;
  cfg.train.batch_size = 2; cfg.train.seq_len = 32; cfg.train.grad_accum = 2; cfg.train.steps = 4;
  cfg.optim.name = *parse_config_enum<OptimizerKind>(optimizer);
  cfg.optim.lr = 1e-2f;
  cfg.optim.grad_clip = 0.5f;  // small enough that some steps clip
  cfg.parallel.bucket_mb = 0.02f;
  cfg.data.train = "unused";
  cfg.validate();
  return cfg;
}

// One step of `model` through the interface: A micro-batches from rng, reduce, norm, clip, update.
// Returns the gradient norm.
double interface_step(const Config& cfg, GPT& model, ParamState& st, ms::testing::TestRng rng, float lr) {
  const int B = cfg.train.batch_size, T = cfg.train.seq_len, A = cfg.train.grad_accum, N = B * T;
  std::vector<int> in(N), tg(N);
  st.begin_step();
  for (int a = 0; a < A; a++) {
    for (int i = 0; i < N; i++) in[i] = static_cast<int>(rng.next() % 300), tg[i] = (in[i] * 7 + 3) % 300;
    model.forward(in.data(), tg.data(), B, T, 1.0f / (N * A));
    st.arm_grad_reduce(a == A - 1);
    model.backward();
  }
  st.finish_grad_reduce();
  const double norm = std::sqrt(st.grad_sq_sum(nullptr));
  st.update(lr, clip_scale(norm, cfg.optim.grad_clip));
  st.finish_param_gather();
  return norm;
}

void expect_same_params(const GPT& a, const GPT& b, const char* what, int step) {
  size_t differ = 0;
  for (size_t i = 0; i < a.num_params(); i++) differ += a.params()[i] != b.params()[i];
  EXPECT_EQ(differ, 0u) << what << ", step " << step << ": weights differ";
}

class ParamStateTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ParamStateTest, LocalStateFollowsThePlainOptimizer) {
  ms::testing::with_threads(1, [&] {
    const Config cfg = small_config(GetParam());
    const int B = cfg.train.batch_size, T = cfg.train.seq_len, A = cfg.train.grad_accum, N = B * T;
    GPT ref(cfg.model, B, T), m(cfg.model, B, T);
    ref.init_weights(5);
    m.init_weights(5);
    Optimizer opt(cfg.optim, optimizer_tensors(ref.param_specs(), cfg.optim), ref.num_params());
    LocalParamState st(m, cfg.optim);
    std::vector<int> in(N), tg(N);
    for (int step = 1; step <= cfg.train.steps; step++) {
      ms::testing::TestRng rng(100 + step), mine(100 + step);
      ref.zero_grad();
      for (int a = 0; a < A; a++) {
        for (int i = 0; i < N; i++) in[i] = static_cast<int>(rng.next() % 300), tg[i] = (in[i] * 7 + 3) % 300;
        ref.forward(in.data(), tg.data(), B, T, 1.0f / (N * A));
        ref.backward();
      }
      const double want = std::sqrt(grad_sq_sum(ref.grads(), ref.num_params()));
      opt.step(ref.params(), ref.grads(), 1e-2f, clip_scale(want, cfg.optim.grad_clip));
      const double got = interface_step(cfg, m, st, mine, 1e-2f);
      EXPECT_EQ(got, want) << "step " << step << ": gradient norm";
      expect_same_params(m, ref, "local", step);
      EXPECT_EQ(st.steps_taken(), step);
    }
  });
}

TEST_P(ParamStateTest, ZeroOnOneRankFollowsTheLocalState) {
  ms::testing::with_threads(1, [&] {
    const Config cfg = small_config(GetParam());
    GPT a(cfg.model, cfg.train.batch_size, cfg.train.seq_len), b(cfg.model, cfg.train.batch_size, cfg.train.seq_len);
    a.init_weights(9);
    b.init_weights(9);
    auto self = make_self_communicator("dp", 0, std::chrono::milliseconds(60000));
    LocalParamState local(a, cfg.optim);
    ZeroDataParallel zero(b, *self, cfg.parallel, cfg.optim);
    ParamState& za = zero;
    ASSERT_GE(zero.layout().buckets().size(), 3u) << "one bucket would not exercise the bucketing";
    for (int step = 1; step <= cfg.train.steps; step++) {
      const double na = interface_step(cfg, a, local, ms::testing::TestRng(200 + step), 1e-2f);
      const double nb = interface_step(cfg, b, za, ms::testing::TestRng(200 + step), 1e-2f);
      EXPECT_NEAR(nb, na, 1e-12 * na) << "step " << step << ": gradient norm";
      expect_same_params(b, a, "ZeRO", step);
    }
    EXPECT_EQ(za.replicas(), 1);
    EXPECT_EQ(za.sum_over_replicas(2.5), 2.5);
  });
}

// Every element of every tensor in exactly one run; the runs' values are the loaded buffers'.
void check_runs_hold(const GPT& m, ParamState& st, const std::vector<float>& P, const std::vector<float>& M,
                     const std::vector<float>& V, int steps) {
  const auto& specs = m.param_specs();
  std::vector<char> all(specs.size(), 1);
  std::vector<StateRun> runs;
  st.append_state_runs(0, all, -1, runs);
  std::vector<int> seen(m.num_params(), 0);
  for (const StateRun& r : runs) {
    ASSERT_NE(r.spec, nullptr);
    ASSERT_LE(r.hi, r.spec->numel());
    for (size_t e = r.lo; e < r.hi; e++) {
      const size_t at = r.spec->offset + e;
      seen[at]++;
      ASSERT_EQ(r.param[e - r.lo], P[at]) << r.spec->name << " element " << e;
      ASSERT_EQ(r.m[e - r.lo], M[at]) << r.spec->name << " element " << e;
      ASSERT_EQ(r.v[e - r.lo], V[at]) << r.spec->name << " element " << e;
    }
  }
  size_t wrong = 0;
  for (int c : seen) wrong += c != 1;
  EXPECT_EQ(wrong, 0u) << "elements not covered exactly once by the state runs";
  EXPECT_EQ(st.steps_taken(), steps);
  for (size_t i = 0; i < m.num_params(); i++) ASSERT_EQ(m.params()[i], P[i]) << "model weight " << i;
}

TEST_P(ParamStateTest, StateRunsHoldWhatWasLoadedOnce) {
  ms::testing::with_threads(1, [&] {
    const Config cfg = small_config(GetParam());
    GPT a(cfg.model, cfg.train.batch_size, cfg.train.seq_len), b(cfg.model, cfg.train.batch_size, cfg.train.seq_len);
    auto self = make_self_communicator("dp", 0, std::chrono::milliseconds(60000));
    LocalParamState local(a, cfg.optim);
    ZeroDataParallel zero(b, *self, cfg.parallel, cfg.optim);
    const size_t n = a.num_params();
    std::vector<float> P(n), M(n), V(n);
    for (size_t i = 0; i < n; i++) P[i] = 0.001f * static_cast<float>(i % 997), M[i] = -1.0f * i, V[i] = 2.0f * i;
    local.load_state(P.data(), M.data(), V.data(), 17);
    zero.load_state(P.data(), M.data(), V.data(), 17);
    check_runs_hold(a, local, P, M, V, 17);
    check_runs_hold(b, zero, P, M, V, 17);
    // reset_from_model: the model's weights, zero moments, no step taken.
    a.init_weights(3);
    b.init_weights(3);
    local.reset_from_model();
    zero.reset_from_model();
    const std::vector<float> W(static_cast<const GPT&>(a).params(), static_cast<const GPT&>(a).params() + n);
    const std::vector<float> zeros(n, 0.0f);
    check_runs_hold(a, local, W, zeros, zeros, 0);
    check_runs_hold(b, zero, W, zeros, zeros, 0);
  });
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ParamStateTest, ::testing::Values("adamw", "lamb"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
