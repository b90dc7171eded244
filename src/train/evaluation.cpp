// evaluation.cpp: see evaluation.h.
#include "train/evaluation.h"

#include "base/check.h"        // MS_CHECK
#include "data/dataloader.h"  // DataLoader
#include "train/trainer.h"    // Trainer

namespace ms {

float eval_loss(Trainer& trainer, DataLoader* val, int batches) {
  MS_CHECK(val || !trainer.parallel().needs_tokens(), "evaluation: this rank uses tokens but has no validation loader");
  if (val) val->set_position({0, 0});
  return trainer.eval_loss(batches, [&](int* inputs, int* targets) { val->next_batch(inputs, targets); });
}

}  // namespace ms
