// test_tp_shapes: the tensor-parallel cut of the model, in process (no communication): every
// parameter tensor's parts (1, 2, 4) place back into the whole tensor, covering every element of
// a sharded tensor exactly once; a part's initial weights are the slice of the whole model's
// (initialisation independent of the split); per-rank parameters, gradients and the logits buffer
// shrink ~1/tp (logits exactly: N x Vp/tp, never N x Vp); layouts the parts do not divide are
// refused by name.
#include <gtest/gtest.h>

#include <vector>

#include "common/test_util.h"
#include "config/model_config.h"
#include "model/gpt.h"
#include "model/param_layout.h"

using namespace ms;

namespace {

ModelConfig small(BlockKind block) { return ms::testing::shape_test_config(block, 2); }

TEST(TpShapes, PartsPlaceBackIntoTheWholeTensorExactlyOnce) {
  for (BlockKind block : {BlockKind::kSequential, BlockKind::kParallel}) {
    const ParamLayout whole = build_param_layout(small(block));
    for (int P : {1, 2, 4}) {
      std::vector<ParamLayout> parts;
      for (int r = 0; r < P; r++) parts.push_back(build_param_layout(small(block), ModelShard{P, r, true}));
      for (size_t i = 0; i < whole.specs.size(); i++) {
        const ParamSpec& w = whole.specs[i];
        std::vector<float> full(w.numel());
        for (size_t k = 0; k < full.size(); k++) full[k] = static_cast<float>(k);
        std::vector<int> hits(full.size(), 0);
        std::vector<float> rebuilt(full.size(), -1.0f);
        for (int r = 0; r < P; r++) {
          const ParamSpec& s = parts[r].specs[i];
          ASSERT_EQ(s.name, w.name);
          ASSERT_EQ(s.full_shape, w.shape) << s.name;
          std::vector<float> local(s.numel());
          slice_param(s, P, r, full.data(), local.data());
          place_param(s, P, r, local.data(), rebuilt.data());
          std::vector<float> mark(local.size(), 1.0f), ones(full.size(), 0.0f);
          place_param(s, P, r, mark.data(), ones.data());
          for (size_t k = 0; k < full.size(); k++) hits[k] += ones[k] != 0.0f;
          if (P > 1) {
            EXPECT_EQ(s.numel() * (s.sharded() ? P : 1), w.numel()) << s.name;
          }
        }
        EXPECT_EQ(rebuilt, full) << w.name << " parts " << P;
        const bool sharded = parts[0].specs[i].sharded();
        for (size_t k = 0; k < full.size(); k++)
          ASSERT_EQ(hits[k], sharded ? 1 : P) << w.name << " element " << k << " parts " << P;
        // Sequence parallelism: the replicated LayerNorms and the position embedding get partial gradients.
        const bool want_partial = P > 1 && (w.kind == ParamKind::kNorm || w.name == "transformer.wpe.weight");
        EXPECT_EQ(parts[0].specs[i].grad_partial, want_partial) << w.name;
      }
    }
  }
}

TEST(TpShapes, InitialWeightsAreTheSliceOfTheWholeModel) {
  const ModelConfig m = small(BlockKind::kParallel);
  GPT whole(m, 1, 16);
  whole.init_weights(11);
  for (int P : {2, 4})
    for (int r = 0; r < P; r++) {
      GPT part(m, 1, 16, DType::kF32, ModelShard{P, r, true});
      part.init_weights(11);
      const auto& specs = part.param_specs();
      for (size_t i = 0; i < specs.size(); i++) {
        std::vector<float> want(specs[i].numel());
        slice_param(specs[i], P, r, static_cast<const GPT&>(whole).params() + whole.param_specs()[i].offset, want.data());
        const float* got = static_cast<const GPT&>(part).params() + specs[i].offset;
        ASSERT_EQ(std::vector<float>(got, got + want.size()), want) << specs[i].name << " part " << r << " of " << P;
      }
    }
}

TEST(TpShapes, PerRankMemoryShrinksWithTheParts) {
  const ModelConfig m = small(BlockKind::kSequential);
  const int B = 2, T = 16;
  const GPT::Footprint whole = GPT(m, B, T).footprint();
  EXPECT_EQ(whole.logits, static_cast<size_t>(B) * T * m.padded_vocab());
  for (int P : {2, 4}) {
    const GPT::Footprint f = GPT(m, B, T, DType::kF32, ModelShard{P, 0, true}).footprint();
    std::printf("tp=%d: params %zu of %zu, logits %zu of %zu, activations %zu of %zu\n", P, f.params, whole.params,
                f.logits, whole.logits, f.activations, whole.activations);
    EXPECT_EQ(f.logits, whole.logits / P) << "the logits buffer holds only this rank's vocabulary columns";
    EXPECT_EQ(f.grads, f.params);
    // Sharded tensors shrink by P; replicated ones (LayerNorms, biases of row-parallel layers,
    // the position embedding) stay: within 1/P of the whole plus those.
    EXPECT_LT(f.params, whole.params / P + 2 * m.max_seq_len * m.n_embd + 8 * m.n_layer * m.n_embd) << P;
    EXPECT_LT(f.activations, whole.activations) << P;
  }
}

TEST(TpShapes, PartsThatDoNotDivideTheModelAreRefused) {
  ModelConfig m = small(BlockKind::kSequential);
  ms::testing::expect_error([&] { build_param_layout(m, ModelShard{3, 0, true}); }, {"3 tensor-parallel parts must divide n_head=4"});
  ms::testing::expect_error([&] { GPT(m, 1, 15, DType::kF32, ModelShard{2, 0, true}); },
                        {"sequence parallelism over 2 parts needs a sequence length divisible by it (T=15)"});
}

}  // namespace

// planned_footprint (the planner's view of a CPU run's memory) is what a GPT of the same arguments
// allocates, for every block, precision, tensor-parallel split, pipeline chunk and slot count.
TEST(TpShapes, PlannedFootprintIsWhatTheModelAllocates) {
  for (BlockKind block : {BlockKind::kSequential, BlockKind::kParallel})
    for (DType prec : {DType::kF32, DType::kBF16})
      for (const ModelShard& shard : {ModelShard{}, ModelShard{2, 1, true}, ModelShard{2, 0, false},
                                      ModelShard{1, 0, false, 0, 1}, ModelShard{2, 0, true, 1, -1}})
        for (int slots : {1, 3}) {
          const ModelConfig m = small(block);
          const GPT::Footprint built = GPT(m, 2, 16, prec, shard, slots).footprint();
          const GPT::Footprint planned = GPT::planned_footprint(m, 2, 16, prec, shard, slots);
          EXPECT_EQ(planned.params, built.params);
          EXPECT_EQ(planned.grads, built.grads);
          EXPECT_EQ(planned.logits, built.logits);
          EXPECT_EQ(planned.activations, built.activations)
              << dtype_name(prec) << " parts " << shard.parts << " layers " << shard.layer_begin << ".."
              << shard.layer_end << " slots " << slots;
        }
}

// Recomputation's savings by hand (fp32, one part, sequential LayerNorm block, GeLU MLP; L layers,
// s slots, N = n rows): a block keeps ln1 (NC), its mean and rstd (2N), qkv (3NC), atty (NC), lse
// (N NH), res_att (NC), ln2 (NC) and its stats (2N), fch and its GeLU (2 N 4C) and out (NC).
// Selective shares atty and lse among all s L blocks; full keeps one output per group of k blocks
// per slot and one group's blocks as a workspace (its last block writing the kept output).
TEST(TpShapes, RecomputationSavesWhatTheClosedFormSays) {
  ModelConfig m = small(BlockKind::kSequential);
  m.n_layer = 6;
  const size_t B = 2, T = 16, N = B * T, C = m.n_embd, NH = m.n_head, L = m.n_layer, s = 3, k = 2;
  const size_t block = N * C + 2 * N + 3 * N * C + N * C + N * NH + N * C + N * C + 2 * N + 2 * N * 4 * C + N * C;
  auto acts = [&](RecomputeKind r, int every) {
    ModelConfig c = m;
    c.recompute = r, c.recompute_every = every;
    const GPT::Footprint f = GPT(c, B, T, DType::kF32, ModelShard{}, s).footprint();
    EXPECT_EQ(f.activations, GPT::planned_footprint(c, B, T, DType::kF32, ModelShard{}, s).activations);
    return static_cast<double>(f.activations);
  };
  const double none = acts(RecomputeKind::kNone, 1);
  EXPECT_EQ(none - acts(RecomputeKind::kSelective, 1), static_cast<double>((s * L - 1) * (N * C + N * NH)));
  const size_t groups = L / k;
  EXPECT_EQ(none - acts(RecomputeKind::kFull, k),
            static_cast<double>(s * L * block - s * groups * N * C - (k * block - N * C)));
  EXPECT_EQ(none - acts(RecomputeKind::kFull, 1), static_cast<double>(s * L * block - s * L * N * C - (block - N * C)));
}
