// evaluation.cpp: see evaluation.h.
#include "train/evaluation.h"

#include "data/dataloader.h"  // DataLoader
#include "model/gpt.h"        // GPT

namespace ms {

float eval_loss(GPT& model, DataLoader& val, int batches, std::vector<int>& inputs, std::vector<int>& targets) {
  const int B = val.B(), T = val.T();
  const size_t N = static_cast<size_t>(B) * T;
  if (inputs.size() < N) inputs.resize(N);
  if (targets.size() < N) targets.resize(N);
  val.set_position({0, 0});
  double sum = 0;
  for (int i = 0; i < batches; i++) {
    val.next_batch(inputs.data(), targets.data());
    sum += model.forward(inputs.data(), targets.data(), B, T);
  }
  return static_cast<float>(sum / batches);
}

}  // namespace ms
