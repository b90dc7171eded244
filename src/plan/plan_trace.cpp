// plan_trace.cpp: see plan_trace.h.
#include "plan/plan_trace.h"

#include <fmt/format.h>

namespace ms::plan {

namespace {
double us(double s) { return s * 1e6; }
}  // namespace

nlohmann::json plan_trace(const StepPrediction& p, int stages) {
  using nlohmann::json;
  json events = json::array();
  for (int s = 0; s < stages; s++) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", s},
                      {"args", {{"name", fmt::format("stage {} (predicted)", s)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", s}, {"args", {{"sort_index", s}}}});
    for (const auto& [tid, name] : {std::pair{0, "compute"}, std::pair{1, "send"}, std::pair{2, "after the pipeline"}})
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", s}, {"tid", tid}, {"args", {{"name", name}}}});
  }
  for (const SimSpan& x : p.timeline.spans) {
    const bool send = x.kind == PpOpKind::kPostSend;
    const char* what = send ? "send" : x.kind == PpOpKind::kForward ? "forward" : "backward";
    events.push_back({{"name", fmt::format("{} {}.{}", what, x.mb, x.chunk)},
                      {"cat", what},
                      {"ph", "X"},
                      {"pid", x.stage},
                      {"tid", send ? 1 : 0},
                      {"ts", us(x.t0)},
                      {"dur", us(x.t1 - x.t0)},
                      {"args", {{"mb", x.mb}, {"chunk", x.chunk}}}});
  }
  for (int s = 0; s < stages; s++) {
    double t = p.timeline.step_s;
    for (const auto& [name, d] :
         {std::pair{"dp exposed", p.dp_exposed}, std::pair{"spine", p.spine}, std::pair{"optimizer", p.optimizer},
          std::pair{"host", p.other}, std::pair{"straggler", p.straggler}}) {
      if (d <= 0) continue;
      events.push_back(
          {{"name", name}, {"cat", name}, {"ph", "X"}, {"pid", s}, {"tid", 2}, {"ts", us(t)}, {"dur", us(d)}});
      t += d;
    }
  }
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"predicted", true}, {"step_time_s", p.step_s}, {"mfu", p.mfu}}}};
}

}  // namespace ms::plan
