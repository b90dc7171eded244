// plan_interval.cpp: see plan_interval.h.
#include "plan/plan_interval.h"

#include <algorithm>

namespace ms::plan {

PlanInterval plan_interval(double step_s, double mfu, const Uncertainty& u) {
  PlanInterval r;
  if ((u.mfu_points <= 0 && u.step_relative <= 0) || step_s <= 0 || mfu <= 0) return r;
  r.known = true, r.basis = u.basis;
  r.step_lo = r.step_hi = step_s, r.mfu_lo = r.mfu_hi = mfu;
  const double work = step_s * mfu;  // the same FLOPs whatever the speed
  if (u.mfu_points > 0) {
    const double e = u.mfu_points / 100.0;
    r.mfu_lo = std::max(mfu - e, mfu * 0.01), r.mfu_hi = mfu + e;
  }
  if (u.step_relative > 0) {
    r.mfu_lo = std::min(r.mfu_lo, work / (step_s * (1 + u.step_relative)));
    r.mfu_hi = std::max(r.mfu_hi, work / (step_s * (1 - u.step_relative)));
  }
  r.step_lo = work / r.mfu_hi, r.step_hi = work / r.mfu_lo;
  return r;
}

}  // namespace ms::plan
