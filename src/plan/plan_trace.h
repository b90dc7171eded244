// plan_trace: a predicted step (step_model.h) as a Chrome trace, in the format `megascale trace`
// writes for measured runs (report/trace_merge.h: "X" slices with pid / tid / ts / dur in
// microseconds, process and thread names as metadata), so a predicted timeline and a measured one
// open side by side in Perfetto: one process per pipeline stage ("stage s (predicted)"), a compute
// track with every forward and backward ("forward mb.chunk"), a send track with every transfer, and
// after the pipeline the exposed DP communication, the optimizer and the host time.
#pragma once
#include <nlohmann/json.hpp>

#include "plan/step_model.h"

namespace ms::plan {

nlohmann::json plan_trace(const StepPrediction& p, int stages);

}  // namespace ms::plan
