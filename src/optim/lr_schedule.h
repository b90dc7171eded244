// lr_schedule: the learning rate per optimizer step. Linear warm-up to max_lr, then a cosine decay
// from max_lr to min_lr ending at total_steps, then min_lr (the llm.c / GPT-3 schedule). Pure
// function of the step, so a resumed run gets the same rates.
#pragma once

namespace ms {

struct LrSchedule {
  float max_lr = 6e-4f;
  float min_lr = 0.f;
  int warmup_steps = 0;
  int total_steps = 0;  // the cosine decay ends here

  // step counts from 0. Warm-up (step < warmup_steps): max_lr * (step+1) / warmup_steps.
  // Then, for step in [warmup_steps, total_steps): min_lr + (max_lr - min_lr) * 0.5 * (1 + cos(pi * f)),
  // f = (step - warmup_steps) / (total_steps - warmup_steps). From total_steps on: min_lr.
  // Computed in double, rounded to float once.
  float at(int step) const;

  // Throws ms::Error for negative rates or step counts, or total_steps < warmup_steps.
  void validate() const;
};

}  // namespace ms
