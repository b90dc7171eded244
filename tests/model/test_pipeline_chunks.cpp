// test_pipeline_chunks: the model cut into pipeline chunks, in process (no communication): chained
// chunks (output of one written into the next's input buffer, gradients handed back) give the
// whole model's loss and gradients bit for bit (the tied token embedding's gradient = the sum of
// its two copies' gradients, equal up to the order of the additions), also with several micro-batches in flight in separate activation
// slots (forward 0, forward 1, backward 0, backward 1) and with tensor-parallel shapes; initial
// weights equal the whole model's; layer ranges that are not ranges are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/test_util.h"
#include "config/model_config.h"
#include "model/gpt.h"
#include "model/param_layout.h"

using namespace ms;

namespace {

ModelConfig small(BlockKind block) { return ms::testing::shape_test_config(block, 4); }

std::vector<int> tokens(int n, uint64_t seed) {
  std::vector<int> t(n);
  uint64_t s = seed;
  for (int& v : t) v = static_cast<int>(splitmix64(s) % 200);
  return t;
}

// Chunks of `bounds` (layer boundaries, e.g. {0, 1, 3, 4}).
std::vector<std::unique_ptr<GPT>> chunks_of(const ModelConfig& m, const std::vector<int>& bounds, int B, int T,
                                            int slots) {
  std::vector<std::unique_ptr<GPT>> c;
  for (size_t i = 0; i + 1 < bounds.size(); i++) {
    ModelShard sh;
    sh.layer_begin = bounds[i], sh.layer_end = bounds[i + 1];
    c.push_back(std::make_unique<GPT>(m, B, T, DType::kF32, sh, slots));
    c.back()->init_weights(7);
  }
  return c;
}

// The gradient of tensor `name` summed over the chunks holding it.
std::vector<float> grad_of(const std::vector<std::unique_ptr<GPT>>& chunks, const std::string& name) {
  std::vector<float> sum;
  for (const auto& c : chunks)
    for (const ParamSpec& s : c->param_specs()) {
      if (s.name != name) continue;
      const float* g = c->grads() + s.offset;
      if (sum.empty()) sum.assign(g, g + s.numel());
      else for (size_t k = 0; k < sum.size(); k++) sum[k] += g[k];
    }
  return sum;
}

TEST(PipelineChunks, ChainedChunksEqualTheWholeModelBitForBit) {
  const int B = 2, T = 8, N = B * T, C = 32;
  for (BlockKind block : {BlockKind::kSequential, BlockKind::kParallel}) {
    const ModelConfig m = small(block);
    GPT whole(m, B, T);
    whole.init_weights(7);
    const int M = 2;  // micro-batches, accumulated
    std::vector<std::vector<int>> in, tg;
    for (int k = 0; k < M; k++) in.push_back(tokens(N, 10 + k)), tg.push_back(tokens(N, 20 + k));
    const float dloss = 1.0f / (N * M);
    float whole_loss[M];
    whole.zero_grad();
    for (int k = 0; k < M; k++) {
      whole_loss[k] = whole.forward(in[k].data(), tg[k].data(), B, T, dloss);
      whole.backward();
    }
    auto chunks = chunks_of(m, {0, 1, 3, 4}, B, T, /*slots=*/M);
    for (auto& c : chunks) {
      for (const ParamSpec& s : c->param_specs()) {
        const ParamSpec& w = whole.spec(s.name);
        ASSERT_EQ(0, std::memcmp(c->params() + s.offset, whole.params() + w.offset, s.numel() * sizeof(float))) << s.name;
      }
      c->zero_grad();
    }
    ASSERT_TRUE(chunks[0]->has_embedding() && !chunks[0]->has_head());
    ASSERT_TRUE(!chunks[2]->has_embedding() && chunks[2]->has_head());
    ASSERT_NO_THROW(chunks[2]->spec("transformer.wte.weight"));  // the head's copy of the tied embedding
    // Forward of both micro-batches first (slots 0 and 1), then both backwards: 1F1B's warm-up.
    float loss[M];
    for (int k = 0; k < M; k++) {
      const float* x = nullptr;
      for (size_t i = 0; i < chunks.size(); i++) {
        GPT& c = *chunks[i];
        c.select_slot(k);
        if (x) std::memcpy(c.input_buffer(k), x, sizeof(float) * N * C);
        loss[k] = c.forward(i == 0 ? in[k].data() : nullptr, tg[k].data(), B, T, dloss);
        if (!c.has_head()) x = c.output();
      }
      EXPECT_EQ(loss[k], whole_loss[k]) << "micro-batch " << k;
    }
    for (int k = 0; k < M; k++) {
      const float* d = nullptr;
      for (size_t i = chunks.size(); i-- > 0;) {
        GPT& c = *chunks[i];
        c.select_slot(k);
        c.backward(d);
        d = c.input_grad();
      }
    }
    for (const ParamSpec& w : whole.param_specs()) {
      const std::vector<float> g = grad_of(chunks, w.name);
      ASSERT_EQ(g.size(), w.numel()) << w.name;
      if (w.name != "transformer.wte.weight") {
        EXPECT_EQ(0, std::memcmp(g.data(), whole.grads() + w.offset, g.size() * sizeof(float))) << w.name;
        continue;
      }
      // The tied embedding: the whole model adds head and embedding gradients micro-batch by
      // micro-batch, the chunks add each copy's sum at the end: the same terms in another order.
      double diff = 0, norm = 0;
      for (size_t k = 0; k < g.size(); k++) {
        const double d = g[k] - whole.grads()[w.offset + k];
        diff += d * d, norm += double(g[k]) * g[k];
      }
      EXPECT_LT(std::sqrt(diff), 1e-6 * std::sqrt(norm)) << w.name;
    }
  }
}

TEST(PipelineChunks, TensorParallelPartsOfAChunkHoldTheirSlices) {
  const ModelConfig m = small(BlockKind::kParallel);
  ModelShard sh{2, 1, true, 1, 3};
  GPT part(m, 2, 8, DType::kF32, sh);
  EXPECT_FALSE(part.has_embedding());
  EXPECT_FALSE(part.has_head());
  EXPECT_EQ(part.first_layer(), 1);
  EXPECT_EQ(part.num_layers(), 2);
  const ParamLayout whole = build_param_layout(m, ModelShard{2, 1, true});
  const ParamLayout mine = build_param_layout(m, sh);
  size_t held = 0;
  for (const ParamSpec& s : whole.specs) held += s.name.find(".h.1.") != std::string::npos || s.name.find(".h.2.") != std::string::npos;
  ASSERT_EQ(mine.specs.size(), held);
  for (const ParamSpec& s : mine.specs) {
    const ParamSpec& w = whole.specs[s.index];
    EXPECT_EQ(s.name, w.name);
    EXPECT_EQ(s.shape, w.shape) << s.name;
  }
}

TEST(PipelineChunks, LayerRangesThatAreNotRangesAreRefused) {
  const ModelConfig m = small(BlockKind::kSequential);
  for (auto [b, e] : {std::pair{2, 2}, std::pair{-1, 2}, std::pair{3, 5}}) {
    ModelShard sh;
    sh.layer_begin = b, sh.layer_end = e;
    ms::testing::expect_error([&] { GPT(m, 1, 8, DType::kF32, sh); }, {"not a non-empty range"});
  }
  ms::testing::expect_error([&] { GPT(m, 1, 8, DType::kF32, {}, 0); }, {"activation slots"});
}

}  // namespace
