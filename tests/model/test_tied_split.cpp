// test_tied_split: the tied token embedding's gradient split in two (GPT::defer_token_grad, used by
// ZeRO-2 to reduce the LM head's dense part while backward goes on): the token embedding's range
// is reported first, right after the LM head, and nothing writes it afterwards; the other ranges
// still cover every parameter once, in decreasing order; adding the deferred rows (row i to token
// token_ids()[i]) gives the ordinary backward's gradient bit for bit — also on top of an earlier,
// undeferred micro-batch — for both block variants. A chunk without both ends refuses by name.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "common/test_util.h"
#include "config/model_config.h"
#include "model/gpt.h"
#include "model/param_layout.h"

using namespace ms;

namespace {

std::vector<int> tokens(int n, uint64_t seed) {
  std::vector<int> t(n);
  uint64_t s = seed;
  for (int& v : t) v = static_cast<int>(splitmix64(s) % 200);
  return t;
}

TEST(TiedEmbeddingSplit, HeadPartFirstAndTheRowsCompleteTheGradientBitForBit) {
  const int B = 2, T = 8, N = B * T;
  for (BlockKind block : {BlockKind::kSequential, BlockKind::kParallel}) {
    const ModelConfig cfg = ms::testing::shape_test_config(block, 3);
    const int C = cfg.n_embd;
    GPT m(cfg, B, T, DType::kF32);
    m.init_weights(7);
    const std::vector<int> in1 = tokens(N, 1), tg1 = tokens(N, 2), in2 = tokens(N, 3), tg2 = tokens(N, 4);
    const float dloss = 1.0f / (2 * N);
    // Reference: two ordinary micro-batches.
    m.zero_grad();
    m.forward(in1.data(), tg1.data(), B, T, dloss);
    m.backward();
    m.forward(in2.data(), tg2.data(), B, T, dloss);
    m.backward();
    const std::vector<float> want(m.grads(), m.grads() + m.num_params());

    // The same, the second backward split.
    m.zero_grad();
    m.forward(in1.data(), tg1.data(), B, T, dloss);
    m.backward();
    m.forward(in2.data(), tg2.data(), B, T, dloss);
    const auto [lo, hi] = m.token_embedding_range();
    ASSERT_EQ(lo, 0u);
    ASSERT_EQ(hi, static_cast<size_t>(m.spec(token_embedding_name(m.config())).numel()));
    std::vector<std::pair<size_t, size_t>> ranges;
    std::vector<float> head_part;
    m.set_grad_ready_hook([&](size_t a, size_t z) {
      ranges.push_back({a, z});
      if (ranges.size() == 1) head_part.assign(m.grads() + a, m.grads() + z);
    });
    m.defer_token_grad();
    m.backward();
    m.set_grad_ready_hook(nullptr);
    ASSERT_FALSE(ranges.empty());
    EXPECT_EQ(ranges[0], std::make_pair(lo, hi)) << "the token embedding's range comes first";
    // Nothing wrote the embedding after it was reported.
    EXPECT_EQ(0, std::memcmp(head_part.data(), m.grads(), hi * sizeof(float)));
    // The others: decreasing, contiguous, from the end down to hi.
    size_t next = m.num_params();
    for (size_t k = 1; k < ranges.size(); k++) {
      EXPECT_EQ(ranges[k].second, next) << "range " << k;
      next = ranges[k].first;
    }
    EXPECT_EQ(next, hi);
    // The rows complete the gradient, bit for bit.
    ASSERT_EQ(m.token_grad_count(), N);
    std::vector<float> got(m.grads(), m.grads() + m.num_params());
    for (int i = 0; i < N; i++) {
      EXPECT_EQ(m.token_ids()[i], in2[i]);
      for (int c = 0; c < C; c++) got[static_cast<size_t>(m.token_ids()[i]) * C + c] += m.token_grad_rows()[i * C + c];
    }
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float))) << "block " << static_cast<int>(block);
    // It applied once: the next backward is ordinary again.
    m.zero_grad();
    m.forward(in2.data(), tg2.data(), B, T, dloss);
    m.backward();
    EXPECT_EQ(m.token_grad_count(), 0);
  }
}

TEST(TiedEmbeddingSplit, AChunkWithoutBothEndsRefuses) {
  const ModelConfig cfg = ms::testing::shape_test_config(BlockKind::kSequential, 2);
  ModelShard first;
  first.layer_begin = 0, first.layer_end = 1;
  GPT m(cfg, 2, 8, DType::kF32, first);
  ms::testing::expect_error([&] { m.defer_token_grad(); }, {"defer_token_grad", "no LM head"});
}

}  // namespace
