// step_sim.cpp: see step_sim.h.
#include "plan/step_sim.h"

#include <algorithm>
#include <map>

#include "base/check.h"
#include "parallel/pp/pp_simulate.h"  // PpMessage, sent_message, consumed_message

namespace ms::plan {

PipelineCosts PipelineCosts::uniform(const ScheduleSpec& spec, double forward_s, double backward_s, double transfer_s) {
  PipelineCosts c;
  c.forward.assign(spec.stages, std::vector<double>(spec.virtual_stages, forward_s));
  c.backward.assign(spec.stages, std::vector<double>(spec.virtual_stages, backward_s));
  c.activation_s = c.gradient_s = transfer_s;
  return c;
}

namespace {

struct StageState {
  size_t pc = 0;
  double t = 0, link_free = 0, compute = 0;
  std::vector<PpMessage> paired;  // sends posted since the last computation (paired mode)
};

}  // namespace

PipelineTimeline simulate_pipeline(const PipelineSchedule& sch, const PipelineCosts& costs) {
  const int P = sch.spec.stages, v = sch.spec.virtual_stages;
  MS_CHECK(static_cast<int>(costs.forward.size()) == P && static_cast<int>(costs.backward.size()) == P,
           "plan: pipeline costs for {} / {} stages, the schedule has {}", costs.forward.size(), costs.backward.size(),
           P);
  for (int s = 0; s < P; s++)
    MS_CHECK(static_cast<int>(costs.forward[s].size()) == v && static_cast<int>(costs.backward[s].size()) == v,
             "plan: stage {} has costs for {} / {} chunks, the schedule {}", s, costs.forward[s].size(),
             costs.backward[s].size(), v);
  std::map<PpMessage, double> arrives;  // a posted send's arrival time
  std::vector<StageState> st(P);
  PipelineTimeline tl;
  for (bool done = false; !done;) {
    bool progress = false;
    done = true;
    for (int s = 0; s < P; s++) {
      StageState& x = st[s];
      const auto& ops = sch.stages[s].ops;
      const size_t pc0 = x.pc;
      for (; x.pc < ops.size(); x.pc++) {
        const PpOp& op = ops[x.pc];
        if (op.kind == PpOpKind::kPostRecv) continue;  // eager transfers: posting costs nothing
        if (op.kind == PpOpKind::kPostSend) {
          const PpMessage msg = sent_message(sch, s, op);
          const double t0 = std::max(x.t, x.link_free);
          const double t1 = t0 + (op.payload == Payload::kActivation ? costs.activation_s : costs.gradient_s);
          x.link_free = arrives[msg] = t1;
          tl.spans.push_back({s, PpOpKind::kPostSend, op.mb, op.chunk, t0, t1});
          if (!costs.decoupled) x.paired.push_back(msg);
          continue;
        }
        if (op.kind == PpOpKind::kWaitSend) {
          x.t = std::max(x.t, arrives.at(sent_message(sch, s, op)));
          continue;
        }
        PpMessage in;
        double start = x.t;
        if (consumed_message(sch, s, op, in)) {
          const auto it = arrives.find(in);
          if (it == arrives.end()) break;  // its send is not posted yet: another stage first
          start = std::max(start, it->second);
        }
        for (const PpMessage& m : x.paired) start = std::max(start, arrives.at(m));
        x.paired.clear();
        const double d = op.kind == PpOpKind::kForward ? costs.forward[s][op.chunk] : costs.backward[s][op.chunk];
        tl.spans.push_back({s, op.kind, op.mb, op.chunk, start, start + d});
        x.t = start + d;
        x.compute += d;
      }
      progress = progress || x.pc > pc0;
      if (x.pc < ops.size()) done = false;
    }
    MS_CHECK(done || progress, "plan: the pipeline simulation is stuck (a schedule that check_schedule would refuse)");
  }
  for (const StageState& x : st) tl.step_s = std::max(tl.step_s, x.t);
  for (const StageState& x : st) {
    tl.compute_s.push_back(x.compute);
    tl.wait_s.push_back(tl.step_s - x.compute);
  }
  return tl;
}

}  // namespace ms::plan
