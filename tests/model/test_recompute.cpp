// test_recompute: activation recomputation (model.recompute) changes what the model keeps, never
// what it computes: selective (the attention core re-run in backward) and full (each group of k
// blocks re-run from its kept input) give the loss and every gradient of no recomputation bit for
// bit, for both blocks, GPT-2 and Llama-style models, fp32 and bf16, group sizes that do and do not
// divide the layers, and with several micro-batches in flight (activation slots, as the pipeline
// keeps them: forwards of slots 0 and 1, then their backwards in either order).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/rng.h"
#include "common/test_util.h"
#include "model/gpt.h"

namespace ms {
namespace {

struct Case {
  const char* name;
  bool llama, parallel;
  DType precision;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

ModelConfig model_of(const Case& c) {
  ModelConfig m;
  if (c.llama) {
    m.preset = ModelPreset::kLlama;
    m.apply_preset();
    m.n_kv_head = 2;
    m.ffn_hidden = 48;
  }
  m.vocab_size = 101, m.n_layer = 5, m.n_head = 4, m.n_embd = 32, m.max_seq_len = 16;
  m.block = c.parallel ? BlockKind::kParallel : BlockKind::kSequential;
  m.attention = AttentionKind::kSliding, m.window = 5, m.full_every = 2;
  m.init_std = 0.1f;
  return m;
}

// Loss and gradients of two micro-batches in flight (slot 0, slot 1 forward; backward 1 then 0).
struct Result {
  float loss0 = 0, loss1 = 0;
  std::vector<float> grads;
};

Result run(ModelConfig m, RecomputeKind r, int every, DType precision) {
  m.recompute = r, m.recompute_every = every;
  const int B = 2, T = 13, N = B * T;
  GPT g(m, B, T, precision, ModelShard{}, /*activation_slots=*/2);
  g.init_weights(7);
  std::vector<int> in(2 * N), tg(2 * N);
  Rng rng(3, 9);
  for (int i = 0; i < 2 * N; i++) {
    in[i] = static_cast<int>(rng.next_u64() % m.vocab_size);
    tg[i] = (in[i] * 7 + 3) % m.vocab_size;
  }
  g.zero_grad();
  Result res;
  g.select_slot(0);
  res.loss0 = g.forward(in.data(), tg.data(), B, T, 1.0f / (2 * N));
  g.select_slot(1);
  res.loss1 = g.forward(in.data() + N, tg.data() + N, B, T, 1.0f / (2 * N));
  g.backward();  // slot 1
  g.select_slot(0);
  g.backward();
  res.grads.resize(g.num_params());
  g.copy_grads_to_host(res.grads.data());
  return res;
}

class Recompute : public ::testing::TestWithParam<Case> {};

TEST_P(Recompute, SameLossAndGradientBitsAsNoRecomputation) {
  const Case c = GetParam();
  const ModelConfig m = model_of(c);
  const Result none = run(m, RecomputeKind::kNone, 1, c.precision);
  struct Mode { RecomputeKind r; int every; const char* what; };
  for (const Mode& mode : {Mode{RecomputeKind::kSelective, 1, "selective"}, Mode{RecomputeKind::kFull, 1, "full/1"},
                           Mode{RecomputeKind::kFull, 2, "full/2 (5 layers: groups of 2, 2, 1)"},
                           Mode{RecomputeKind::kFull, 5, "full/5"}}) {
    const Result got = run(m, mode.r, mode.every, c.precision);
    EXPECT_EQ(got.loss0, none.loss0) << mode.what;
    EXPECT_EQ(got.loss1, none.loss1) << mode.what;
    ASSERT_EQ(got.grads.size(), none.grads.size());
    EXPECT_EQ(0, std::memcmp(got.grads.data(), none.grads.data(), got.grads.size() * sizeof(float))) << mode.what;
  }
  // The gradients are not all zero (the comparison is not vacuous).
  double norm = 0;
  for (float x : none.grads) norm += static_cast<double>(x) * x;
  EXPECT_GT(norm, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Cases, Recompute,
                         ::testing::Values(Case{"gpt2_sequential_fp32", false, false, DType::kF32},
                                           Case{"gpt2_parallel_bf16", false, true, DType::kBF16},
                                           Case{"llama_sequential_fp32", true, false, DType::kF32},
                                           Case{"llama_parallel_fp32", true, true, DType::kF32},
                                           Case{"llama_sequential_bf16", true, false, DType::kBF16}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ms
