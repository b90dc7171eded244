// plan_interval: the range `megascale plan` prints around its step time and MFU, from how far the
// planner was off on data it did not see (the cluster's [uncertainty]: the held-out RMS of the MFU
// in points, or a relative error of the step time). The range is one RMS either side: about two
// thirds of held-out predictions fall inside it if the errors are normal. The step's range follows
// the MFU's (same FLOPs: step x MFU is constant), and the other way round. Unknown: no range.
#pragma once
#include <string>

#include "plan/cluster_desc.h"  // Uncertainty

namespace ms::plan {

struct PlanInterval {
  bool known = false;
  double step_lo = 0, step_hi = 0, mfu_lo = 0, mfu_hi = 0;
  std::string basis;
};

// step_s and mfu (a fraction) of a prediction; the wider of the two ranges when both are known.
PlanInterval plan_interval(double step_s, double mfu, const Uncertainty& u);

}  // namespace ms::plan
