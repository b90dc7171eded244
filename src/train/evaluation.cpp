// evaluation.cpp: see evaluation.h.
#include "train/evaluation.h"

#include "data/dataloader.h"  // DataLoader
#include "train/trainer.h"    // Trainer

namespace ms {

float eval_loss(Trainer& trainer, DataLoader& val, int batches) {
  if (trainer.needs_tokens()) val.set_position({0, 0});
  return trainer.eval_loss(batches, [&](int* inputs, int* targets) { val.next_batch(inputs, targets); });
}

}  // namespace ms
