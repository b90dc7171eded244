// test_vocab_parallel_ce: the three-phase vocabulary-parallel softmax + cross-entropy against a
// direct double-precision evaluation of -log softmax and its gradient, for the vocabulary split
// over 1, 2 and 4 "ranks" (the reductions between the phases done here: max, then sum), with a
// padded vocabulary (a rank whose columns are partly or wholly padding), ignored rows (-1), and
// the bf16 gradient variant (the fp32 gradient rounded to nearest even). Tolerances: losses 2e-6
// relative, gradients 2e-6 of the largest gradient (float exp with <= 1.4 ulp error, double sums).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "common/test_util.h"
#include "kernels/vocab_parallel_cross_entropy.h"

using namespace ms;

namespace {

TEST(VocabParallelCrossEntropy, MatchesDirectSoftmaxForEverySplit) {
  const int N = 7, V = 200, Vp = 256;
  ms::testing::TestRng rng(3);
  std::vector<float> logits(static_cast<size_t>(N) * Vp);
  for (float& x : logits) x = rng.uniform(-4.0f, 4.0f);
  std::vector<int> targets = {0, 5, 199, -1, 63, 64, 130};
  const float dloss = 0.25f;
  // Reference in double.
  std::vector<double> ref_loss(N, 0.0), ref_grad(static_cast<size_t>(N) * Vp, 0.0);
  for (int i = 0; i < N; i++) {
    if (targets[i] < 0) continue;
    const float* x = logits.data() + static_cast<size_t>(i) * Vp;
    double mx = -1e300, s = 0;
    for (int j = 0; j < V; j++) mx = std::max(mx, static_cast<double>(x[j]));
    for (int j = 0; j < V; j++) s += std::exp(x[j] - mx);
    ref_loss[i] = std::log(s) + mx - x[targets[i]];
    for (int j = 0; j < V; j++) ref_grad[static_cast<size_t>(i) * Vp + j] = dloss * (std::exp(x[j] - mx) / s - (j == targets[i]));
  }
  double gmax = 0;
  for (double v : ref_grad) gmax = std::max(gmax, std::fabs(v));
  for (int parts : {1, 2, 4}) {
    const int Vl = Vp / parts;
    std::vector<std::vector<float>> shard(parts), maxes(parts), sums(parts), loss(parts), grad(parts);
    std::vector<std::vector<bf16_t>> grad16(parts);
    for (int r = 0; r < parts; r++) {
      shard[r].resize(static_cast<size_t>(N) * Vl);
      for (int i = 0; i < N; i++)
        std::copy_n(logits.data() + static_cast<size_t>(i) * Vp + r * Vl, Vl, shard[r].data() + static_cast<size_t>(i) * Vl);
      maxes[r].resize(N);
      vocab_shard_row_max(maxes[r].data(), shard[r].data(), targets.data(), N, V, Vl, r * Vl);
    }
    std::vector<float> gm(N, -INFINITY), gs(2 * N, 0.0f);
    for (int r = 0; r < parts; r++)
      for (int i = 0; i < N; i++) gm[i] = std::max(gm[i], maxes[r][i]);
    for (int r = 0; r < parts; r++) {
      sums[r].resize(2 * N);
      vocab_shard_sum_exp(sums[r].data(), shard[r].data(), gm.data(), targets.data(), N, V, Vl, r * Vl);
      for (int i = 0; i < 2 * N; i++) gs[i] += sums[r][i];
    }
    for (int r = 0; r < parts; r++) {
      loss[r].resize(N);
      grad[r].resize(static_cast<size_t>(N) * Vl);
      grad16[r].resize(static_cast<size_t>(N) * Vl);
      std::vector<float> loss16(N);
      vocab_shard_loss_grad_bf16(loss16.data(), grad16[r].data(), shard[r].data(), gm.data(), gs.data(), targets.data(),
                                 N, V, Vl, r * Vl, dloss);
      vocab_shard_loss_grad(loss[r].data(), grad[r].data(), shard[r].data(), gm.data(), gs.data(), targets.data(), N, V,
                            Vl, r * Vl, dloss);
      for (int i = 0; i < N; i++) {
        EXPECT_EQ(loss16[i], loss[r][i]) << "parts " << parts;
        EXPECT_NEAR(loss[r][i], ref_loss[i], 2e-6 * std::max(1.0, ref_loss[i])) << "parts " << parts << " row " << i;
        for (int j = 0; j < Vl; j++) {
          const size_t o = static_cast<size_t>(i) * Vl + j;
          const double want = ref_grad[static_cast<size_t>(i) * Vp + r * Vl + j];
          EXPECT_NEAR(grad[r][o], want, 2e-6 * gmax) << "parts " << parts << " row " << i << " col " << r * Vl + j;
          EXPECT_EQ(grad16[r][o], f32_to_bf16_rne(grad[r][o]));
          if (r * Vl + j >= V || targets[i] < 0) {
            EXPECT_EQ(grad[r][o], 0.0f) << "padded column or ignored row";
          }
        }
      }
    }
  }
}

TEST(VocabParallelCrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  std::vector<float> logits(2 * 64, 0.0f), mx(2);
  std::vector<int> targets = {3, 70};
  ms::testing::expect_error([&] { vocab_shard_row_max(mx.data(), logits.data(), targets.data(), 2, 64, 64, 0); },
                        {"target 70 of row 1 outside [-1, 64)"});
}

}  // namespace
