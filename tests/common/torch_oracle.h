// torch_oracle: what the whole-model PyTorch comparisons share (test_torch_reference: GPT-2,
// tests/py/torch_gpt.py; test_torch_llama: the Llama family, tests/py/torch_llama.py): S learnable
// batches and the AdamW hyper-parameters written beside the exported model for the Python side,
// and the S training steps of our Trainer on the same batches compared with the reference's losses.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/rng.h"
#include "base/safetensors.h"
#include "train/trainer.h"

namespace ms::testing {

// S batches of B x T: random ids < V and learnable targets (3 id + 1) mod V, so training lowers the loss.
struct OracleBatches {
  int S, B, T;
  std::vector<int32_t> inputs, targets;
  OracleBatches(int S_, int B_, int T_, int V) : S(S_), B(B_), T(T_), inputs(static_cast<size_t>(S_) * B_ * T_),
                                                 targets(inputs.size()) {
    Rng rng(7, 1);
    for (size_t i = 0; i < inputs.size(); i++) {
      inputs[i] = static_cast<int32_t>(rng.next_u64() % V);
      targets[i] = (3 * inputs[i] + 1) % V;
    }
  }
  // dir/batch.safetensors (inputs, targets: S x B x T) and dir/hyper.json (AdamW and clipping).
  void write(const std::string& dir, const OptimConfig& o) const {
    StFile batch;
    batch.tensors["inputs"] = st_i32({S, B, T}, inputs.data());
    batch.tensors["targets"] = st_i32({S, B, T}, targets.data());
    save_safetensors(dir + "/batch.safetensors", batch);
    std::ofstream(dir + "/hyper.json") << nlohmann::json{{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2},
                                                         {"eps", o.eps}, {"weight_decay", o.weight_decay},
                                                         {"grad_clip", o.grad_clip}}.dump();
  }
  // The largest |ours - theirs| of batch 0's logits (real vocabulary columns; ours from a forward
  // without a loss gradient) over the largest |theirs|.
  double logits_error(GPT& model, const StFile& ref, int V) const {
    model.forward(inputs.data(), targets.data(), B, T);
    const int Vp = model.config().padded_vocab();
    std::vector<double> ours, theirs = ref.at("logits").to_f64();
    for (int n = 0; n < B * T; n++)
      for (int j = 0; j < V; j++) ours.push_back(model.logits()[static_cast<size_t>(n) * Vp + j]);
    double scale = 0, diff = 0;
    for (size_t i = 0; i < theirs.size(); i++)
      scale = std::max(scale, std::fabs(theirs[i])), diff = std::max(diff, std::fabs(ours[i] - theirs[i]));
    return diff / scale;
  }
  // S optimizer steps of `trainer` on the batches, each loss within rel of ref_losses[s]; returns
  // the worst relative difference. The reference must learn (its last loss below its first).
  double expect_steps_follow(Trainer& trainer, const std::vector<double>& ref_losses, double rel) const {
    int s = 0;
    double worst = 0;
    for (int step = 0; step < S; step++) {
      const StepStats st = trainer.train_step([&](int* in, int* tg) {
        std::copy_n(inputs.data() + static_cast<size_t>(s) * B * T, B * T, in);
        std::copy_n(targets.data() + static_cast<size_t>(s) * B * T, B * T, tg);
        s++;
      });
      EXPECT_NEAR(st.loss, ref_losses[step], rel * std::fabs(ref_losses[step])) << "step " << step;
      worst = std::max(worst, std::fabs(st.loss - ref_losses[step]) / std::fabs(ref_losses[step]));
    }
    EXPECT_LT(ref_losses.back(), ref_losses.front()) << "the reference run should learn";
    return worst;
  }
};

}  // namespace ms::testing
