// test_cuda_training (label gpu): one process training on the GPU (train.device = cuda) against
// the same run on the CPU, the oracle: a small GPT (L2, C64, NH4, T64, V 500 padded to 512),
// 6 steps of 2 micro-batches on fixed tokens, for both blocks x both attentions x AdamW and LAMB x
// fp32 and bf16, and Llama-style models (model.preset = llama: RMSNorm with eps 1e-6, RoPE, SwiGLU,
// no biases; grouped-query or multi-query attention, NKV = 2 or 1 of 4 heads) in both blocks and
// precisions, with the LM head tied and untied. Checks:
//  - fp32: every step's loss within 1e-5 relative and the final weights within 3e-5 relative L2
//    (the layout-equivalence bars of the data-parallel tests);
//  - bf16: within kBf16LossTol / kBf16WeightTol (provisional, about twice the CPU's own bf16-vs-fp32
//    spread at this size; the measured values are printed so that the first GPU run sets them);
//  - the same GPU run twice gives the same bits (losses and weights: no atomics, fixed algorithms);
//  - activation recomputation (selective; full in groups of 2 of 4 layers) gives the bits of
//    recompute = none on the GPU (it changes what is kept, not the arithmetic);
//  - no device allocation after the first step (base/device.h counts cudaMalloc);
//  - a GPU run's training state (weights, moments, steps) loaded into a CPU trainer, and back,
//    continues with the same losses as staying on the first device (checkpoints move between devices).
// Skips where no CUDA device opens (CI); every failure names the configuration.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/device.h"   // cuda_available, device_allocations
#include "train/trainer.h"

namespace ms {
namespace {

constexpr int kSteps = 6;
constexpr double kFp32LossTol = 1e-5, kFp32WeightTol = 3e-5;
constexpr double kBf16LossTol = 2e-2, kBf16WeightTol = 5e-2;

struct Case {
  BlockKind block;
  AttentionKind attention;
  OptimizerKind optimizer;
  DType precision;
  ModelPreset preset = ModelPreset::kGpt2;  // kLlama: apply_preset(), then the two fields below
  int n_kv_head = 0;                        // llama: key/value heads of the 4 (0: 4, multi-head)
  bool tie_embeddings = false;              // llama: the LM head tied to the token embedding
  RecomputeKind recompute = RecomputeKind::kNone;
  int recompute_every = 1;
  int n_layer = 2;
  std::string name() const {
    std::string n = fmt::format("{}/{}/{}/{}", config_name(block), config_name(attention), config_name(optimizer),
                                dtype_name(precision));
    if (preset == ModelPreset::kLlama)
      n += fmt::format("/llama nkv {} {}", n_kv_head, tie_embeddings ? "tied" : "untied");
    if (recompute != RecomputeKind::kNone)
      n += fmt::format("/L{} recompute {} every {}", n_layer, config_name(recompute), recompute_every);
    return n;
  }
};

Config small_config(const Case& k, Device d) {
  Config c;
  if (k.preset == ModelPreset::kLlama) {
    c.model.preset = ModelPreset::kLlama;
    c.model.apply_preset();
    c.model.n_kv_head = k.n_kv_head;
    c.model.tie_embeddings = k.tie_embeddings;
    c.model.norm_eps = 1e-6f;  // Llama 2/3's, where GPT-2 has LayerNorm's 1e-5
  }
  c.model.recompute = k.recompute;
  c.model.recompute_every = k.recompute_every;
  c.model.vocab_size = 500;
  c.model.n_layer = k.n_layer;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.max_seq_len = 64;
  c.model.block = k.block;
  c.model.attention = k.attention;
  c.model.window = 16;
  c.optim.name = k.optimizer;
  // LAMB's step is relative to each tensor's norm: at AdamW's 1e-3 six steps barely move a fresh model
  // (checked on the CPU: the sliding-window runs did not learn), so it gets a larger rate.
  c.optim.lr = k.optimizer == OptimizerKind::kLamb ? 2e-2f : 1e-3f;
  c.optim.warmup_steps = 2;
  c.optim.grad_clip = 1.0f;
  c.data.train = "unused";
  c.train.batch_size = 2;
  c.train.seq_len = 64;
  c.train.grad_accum = 2;
  c.train.steps = kSteps;
  c.train.precision = k.precision;
  c.train.device = d;
  c.validate();
  return c;
}

// Fixed tokens: micro-batch m of the whole run, a learnable map (target = 7 * input + 3 mod V).
Trainer::MicroBatches tokens(const Config& c) {
  auto m = std::make_shared<int>(0);
  return [m, V = c.model.vocab_size, n = c.train.batch_size * c.train.seq_len](int* in, int* tg) {
    uint64_t x = 977 + 131 * static_cast<uint64_t>((*m)++);
    for (int i = 0; i < n; i++) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      in[i] = static_cast<int>((x >> 33) % static_cast<uint64_t>(V));
      tg[i] = (7 * in[i] + 3) % V;
    }
  };
}

struct RunResult {
  std::vector<float> losses, weights;
  size_t allocations_after_step1 = 0, allocations_at_end = 0;
};

RunResult train(const Config& c, int steps = kSteps) {
  Trainer t(c);
  const Trainer::MicroBatches next = tokens(c);
  RunResult r;
  for (int s = 0; s < steps; s++) {
    r.losses.push_back(t.train_step(next).loss);
    if (s == 0) r.allocations_after_step1 = device_allocations();
  }
  r.allocations_at_end = device_allocations();
  r.weights.resize(t.model().num_params());
  t.model().copy_params_to_host(r.weights.data());
  return r;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double d = 0, n = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    d += (static_cast<double>(a[i]) - ref[i]) * (static_cast<double>(a[i]) - ref[i]);
    n += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / n);
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (BlockKind b : {BlockKind::kSequential, BlockKind::kParallel})
    for (AttentionKind a : {AttentionKind::kFull, AttentionKind::kSliding})
      for (OptimizerKind o : {OptimizerKind::kAdamW, OptimizerKind::kLamb})
        for (DType p : {DType::kF32, DType::kBF16}) out.push_back({b, a, o, p});
  return out;
}

// Llama-style models: each block, precision and head tying at least once; GQA, MQA and one multi-head.
std::vector<Case> llama_cases() {
  const auto llama = [](BlockKind b, AttentionKind a, OptimizerKind o, DType p, int nkv, bool tied) {
    return Case{b, a, o, p, ModelPreset::kLlama, nkv, tied};
  };
  using B = BlockKind;
  using A = AttentionKind;
  using O = OptimizerKind;
  return {llama(B::kSequential, A::kFull, O::kAdamW, DType::kF32, 2, false),
          llama(B::kSequential, A::kSliding, O::kAdamW, DType::kBF16, 1, true),
          llama(B::kParallel, A::kSliding, O::kLamb, DType::kF32, 1, true),
          llama(B::kParallel, A::kFull, O::kAdamW, DType::kBF16, 2, false),
          llama(B::kSequential, A::kFull, O::kAdamW, DType::kBF16, 2, true),
          llama(B::kParallel, A::kFull, O::kAdamW, DType::kF32, 0, false)};  // multi-head (NKV = NH)
}

class CudaTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device opens: " << cuda_unavailable_reason();
  }
};

// The GPU run against the CPU run of one configuration.
void expect_matches_cpu(const Case& k) {
  SCOPED_TRACE(k.name());
  const RunResult cpu = train(small_config(k, Device::kCpu));
  const RunResult gpu = train(small_config(k, Device::kCuda));
  const bool fp32 = k.precision == DType::kF32;
  double worst_loss = 0;
  for (int s = 0; s < kSteps; s++)
    worst_loss = std::max(worst_loss, std::abs(static_cast<double>(gpu.losses[s]) - cpu.losses[s]) /
                                          std::abs(static_cast<double>(cpu.losses[s])));
  const double w = rel_l2(gpu.weights, cpu.weights);
  std::printf("[measured] %-40s loss rel %.3g  weights rel L2 %.3g  (cpu loss %.6f -> %.6f)\n", k.name().c_str(),
              worst_loss, w, cpu.losses.front(), cpu.losses.back());
  EXPECT_LE(worst_loss, fp32 ? kFp32LossTol : kBf16LossTol);
  EXPECT_LE(w, fp32 ? kFp32WeightTol : kBf16WeightTol);
  EXPECT_LT(cpu.losses.back(), cpu.losses.front());  // the run learns (the comparison means something)
  EXPECT_EQ(gpu.allocations_at_end, gpu.allocations_after_step1) << "device allocations after the first step";
}

TEST_F(CudaTraining, MatchesTheCpuRunForEveryBlockAttentionOptimizerAndPrecision) {
  for (const Case& k : all_cases()) expect_matches_cpu(k);
}

// The CPU oracle runs NKV < NH once the CPU attention has NKV (the GQA branch); before that merge its
// runs of those cases stop with the CPU backend's named error, and only the multi-head case compares.
TEST_F(CudaTraining, LlamaStyleMatchesTheCpuRun) {
  for (const Case& k : llama_cases()) expect_matches_cpu(k);
}

TEST_F(CudaTraining, SameBitsOnARerun) {
  for (const Case& k : {Case{BlockKind::kParallel, AttentionKind::kSliding, OptimizerKind::kLamb, DType::kBF16},
                        Case{BlockKind::kSequential, AttentionKind::kFull, OptimizerKind::kAdamW, DType::kF32},
                        llama_cases()[1]}) {
    SCOPED_TRACE(k.name());
    const RunResult a = train(small_config(k, Device::kCuda));
    const RunResult b = train(small_config(k, Device::kCuda));
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_TRUE(a.weights == b.weights) << "weights differ between two identical GPU runs";
  }
}

// Recomputation keeps fewer activations and recomputes the rest with the same kernels on the same
// inputs: selective (the attention core) and full (groups of 2 of 4 layers) give none's bits.
TEST_F(CudaTraining, RecomputationGivesTheBitsOfNone) {
  for (Case base : {llama_cases()[3], Case{BlockKind::kSequential, AttentionKind::kSliding, OptimizerKind::kAdamW,
                                           DType::kF32, ModelPreset::kLlama, 1, true}}) {
    base.n_layer = 4;
    const RunResult none = train(small_config(base, Device::kCuda));
    for (const auto& [kind, every] : {std::pair{RecomputeKind::kSelective, 1}, std::pair{RecomputeKind::kFull, 2}}) {
      Case k = base;
      k.recompute = kind;
      k.recompute_every = every;
      SCOPED_TRACE(k.name());
      const RunResult r = train(small_config(k, Device::kCuda));
      EXPECT_EQ(r.losses, none.losses);
      EXPECT_TRUE(r.weights == none.weights) << "weights differ from recompute = none's";
      EXPECT_EQ(r.allocations_at_end, r.allocations_after_step1) << "device allocations after the first step";
    }
  }
}

// Training state moved between devices at a step boundary continues as if it had stayed.
TEST_F(CudaTraining, StateMovesBetweenDevices) {
  const Case k{BlockKind::kSequential, AttentionKind::kFull, OptimizerKind::kAdamW, DType::kF32};
  for (const auto& [from, to] : {std::pair{Device::kCuda, Device::kCpu}, std::pair{Device::kCpu, Device::kCuda}}) {
    SCOPED_TRACE(fmt::format("{} -> {}", device_name(from), device_name(to)));
    const Config cf = small_config(k, from), ct = small_config(k, to);
    Trainer a(cf), b(ct);
    const Trainer::MicroBatches next_a = tokens(cf), next_b = tokens(ct);
    for (int s = 0; s < 3; s++) a.train_step(next_a);
    // The checkpoint's view of a's state (host memory), loaded into b as a restore does.
    const GPT& m = a.model();
    const size_t n = m.num_params();
    std::vector<float> p(n), mom1(n), mom2(n);
    for (const StateRun& r : a.parallel().state_runs()) {  // GPU runs point into device memory
      EXPECT_EQ(r.device, from);
      const size_t at = r.spec->offset + r.lo, bytes = (r.hi - r.lo) * sizeof(float);
      copy_bytes(p.data() + at, Device::kCpu, r.param, r.device, bytes);
      copy_bytes(mom1.data() + at, Device::kCpu, r.m, r.device, bytes);
      copy_bytes(mom2.data() + at, Device::kCpu, r.v, r.device, bytes);
    }
    if (from == Device::kCuda) stream_sync({});
    b.parallel().load_chunk_state(0, p.data(), mom1.data(), mom2.data(), a.parallel().steps_taken());
    auto skip = tokens(ct);  // b's token stream at a's position
    std::vector<int> in(static_cast<size_t>(ct.train.batch_size) * ct.train.seq_len), tg(in.size());
    for (int i = 0; i < 3 * ct.train.grad_accum; i++) skip(in.data(), tg.data());
    for (int s = 3; s < kSteps; s++) {
      const float la = a.train_step(next_a).loss, lb = b.train_step(skip).loss;
      EXPECT_NEAR(lb, la, kFp32LossTol * std::abs(la)) << "step " << s + 1;
    }
  }
}

}  // namespace
}  // namespace ms
