// test_model_math: the planner's closed forms against the papers' own numbers:
//  - SC21 eq. 2 gives the models' names: GPT-3 175B (96 x 12288, V 51200) 174.6e9, and the 22B, 530B
//    and 1T models of Korthikanti et al. Table 1 within 2%;
//  - Korthikanti eq. 7 with the published iteration times of their Table 5 (A100, 312 TFLOP/s, SP +
//    selective recomputation) gives the MFU they publish (41.5, 51.4, 56.0, 56.3%) within 0.5 points;
//    for MegaScale's 175B (V 64000) it gives 1.077e12 FLOPs per token (planner.md §3);
//  - the activation forms: SP + selective is 34 s b h / t; at t = 1 sequence parallelism changes
//    nothing; selective drops exactly the 5 a s / h term; full recomputation keeps 2 s b h.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/model_math.h"

using namespace ms::plan;

namespace {

GptShape shape(int heads, int hidden, int layers, int vocab = 51200, int seq = 2048) {
  GptShape m;
  m.heads = heads, m.hidden = hidden, m.layers = layers, m.vocab = vocab, m.seq = seq;
  return m;
}

TEST(ModelMath, ParametersGiveThePublishedModelSizes) {
  EXPECT_NEAR(megatron_params(shape(96, 12288, 96)) / 1e9, 174.6, 0.1);
  EXPECT_NEAR(megatron_params(shape(64, 6144, 48)) / 22e9, 1.0, 0.02);
  EXPECT_NEAR(megatron_params(shape(128, 20480, 105)) / 530e9, 1.0, 0.02);
  EXPECT_NEAR(megatron_params(shape(160, 25600, 128)) / 1e12, 1.0, 0.02);
}

TEST(ModelMath, FlopsReproduceThePublishedMfu) {
  struct Row {
    GptShape m;
    int gpus, batch;
    double seconds, mfu;
  };
  const Row rows[] = {{shape(64, 6144, 48), 8, 4, 1.10, 0.415},
                      {shape(96, 12288, 96), 64, 64, 13.75, 0.514},
                      {shape(128, 20480, 105), 280, 280, 37.83, 0.560},
                      {shape(160, 25600, 128), 512, 512, 71.49, 0.563}};
  for (const Row& r : rows) {
    const double tokens = static_cast<double>(r.batch) * r.m.seq;
    const double mfu = megatron_flops_per_token(r.m) * tokens / (r.seconds * r.gpus * 312e12);
    EXPECT_NEAR(mfu, r.mfu, 0.005) << r.m.hidden;
  }
  EXPECT_NEAR(megatron_flops_per_token(shape(128, 12288, 96, 64000)) / 1e12, 1.077, 0.001);
}

TEST(ModelMath, ActivationForms) {
  const GptShape m = shape(96, 12288, 96);
  const double s = m.seq, h = m.hidden, a = m.heads;
  const int b = 1, t = 8;
  const double sbh = s * b * h;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, b, t, true, Recompute::kSelective), 34.0 * sbh / t);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, b, t, true, Recompute::kNone), sbh / t * (34.0 + 5.0 * a * s / h));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, b, t, false, Recompute::kNone),
                   sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, b, t, false, Recompute::kSelective), sbh * (10.0 + 24.0 / t));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, b, 1, true, Recompute::kNone),
                   layer_activation_bytes(m, b, 1, false, Recompute::kNone));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, 2, t, false, Recompute::kFull), 2.0 * s * 2 * h);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, 2, t, true, Recompute::kFull), 2.0 * s * 2 * h / t);
}

TEST(ModelMath, AnEmptyShapeIsNamed) {
  ms::testing::expect_error([] { megatron_params(shape(0, 12288, 96)); }, {"model shape", "heads"});
}

}  // namespace
