// lr_schedule.cpp: see lr_schedule.h.
#include "optim/lr_schedule.h"

#include <cmath>  // std::cos

#include "base/check.h"  // MS_CHECK

namespace ms {

float LrSchedule::at(int step) const {
  MS_CHECK(step >= 0, "LrSchedule::at: step must be >= 0, got {}", step);
  const double hi = max_lr, lo = min_lr;
  if (step < warmup_steps) return static_cast<float>(hi * (step + 1) / warmup_steps);
  if (step >= total_steps) return min_lr;
  const double f = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  const double pi = 3.14159265358979323846;
  return static_cast<float>(lo + (hi - lo) * 0.5 * (1.0 + std::cos(pi * f)));
}

void LrSchedule::validate() const {
  MS_CHECK(max_lr >= 0.f && min_lr >= 0.f, "lr schedule: max_lr {} and min_lr {} must be >= 0", max_lr, min_lr);
  MS_CHECK(warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got {}", warmup_steps);
  MS_CHECK(total_steps >= warmup_steps, "lr schedule: total_steps {} must be >= warmup_steps {}", total_steps,
           warmup_steps);
}

}  // namespace ms
