// pp_schedule.cpp: see pp_schedule.h.
#include "parallel/pp/pp_schedule.h"

#include <algorithm>  // std::min
#include <deque>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "base/check.h"  // MS_CHECK

namespace ms {

void validate_schedule(const ScheduleSpec& s, int n_layer) {
  MS_CHECK(s.stages >= 1 && s.virtual_stages >= 1 && s.micro_batches >= 1 && s.send_slots >= 1,
           "pipeline schedule: stages={}, virtual_stages={}, micro_batches={} and send_slots={} must all be >= 1",
           s.stages, s.virtual_stages, s.micro_batches, s.send_slots);
  MS_CHECK(s.kind == PipelineScheduleKind::kInterleaved || s.virtual_stages == 1,
           "pipeline schedule: 1f1b runs one model chunk per stage (virtual_stages={}); use 'interleaved'",
           s.virtual_stages);
  MS_CHECK(s.kind != PipelineScheduleKind::kInterleaved || s.micro_batches % s.stages == 0,
           "pipeline schedule: interleaved needs micro-batches ({}) to be a multiple of the pipeline stages ({})",
           s.micro_batches, s.stages);
  MS_CHECK(n_layer <= 0 || n_layer % (s.stages * s.virtual_stages) == 0,
           "pipeline schedule: {} layers do not split into {} stages x {} virtual stages", n_layer, s.stages,
           s.virtual_stages);
}

namespace {

// Megatron's order of computations on one stage: (is_forward, mb, local chunk) and phase counts.
struct Step {
  bool forward;
  int mb, chunk;
};

std::vector<Step> computation_order(const ScheduleSpec& s, int stage, StageSchedule& out) {
  const int P = s.stages, v = s.virtual_stages, m = s.micro_batches;
  const int total = m * v;
  int warmup;
  if (s.kind == PipelineScheduleKind::k1F1B) {
    warmup = std::min(P - stage - 1, m);
  } else if (m == P) {
    warmup = total;  // Megatron: all forwards first when there is one micro-batch per stage
  } else {
    warmup = std::min((P - stage - 1) * 2 + (v - 1) * P, total);
  }
  auto mb_of = [&](int k) { return s.kind == PipelineScheduleKind::k1F1B ? k : (k / (P * v)) * P + k % P; };
  auto chunk_of = [&](int k, bool forward) {
    if (s.kind == PipelineScheduleKind::k1F1B) return 0;
    const int c = (k % (P * v)) / P;
    return forward ? c : v - 1 - c;
  };
  std::vector<Step> order;
  for (int k = 0; k < warmup; k++) order.push_back({true, mb_of(k), chunk_of(k, true)});
  const int steady = total - warmup;
  for (int k = 0; k < steady; k++) {
    order.push_back({true, mb_of(k + warmup), chunk_of(k + warmup, true)});
    order.push_back({false, mb_of(k), chunk_of(k, false)});
  }
  for (int k = steady; k < total; k++) order.push_back({false, mb_of(k), chunk_of(k, false)});
  out.warmup = warmup, out.steady = steady, out.cooldown = total - steady;
  return order;
}

}  // namespace

PipelineSchedule build_schedule(const ScheduleSpec& spec) {
  validate_schedule(spec);
  PipelineSchedule sch;
  sch.spec = spec;
  const int P = spec.stages, G = P * spec.virtual_stages;
  sch.stages.resize(P);
  for (int s = 0; s < P; s++) {
    StageSchedule& st = sch.stages[s];
    // Outstanding sends per (payload, local chunk), oldest first, for the buffer-reuse waits.
    std::map<std::pair<Payload, int>, std::deque<PpOp>> in_flight;
    auto post_send = [&](PpOp send) {
      auto& q = in_flight[{send.payload, send.chunk}];
      if (static_cast<int>(q.size()) == spec.send_slots) {  // its buffer is about to be reused
        PpOp w = q.front();
        w.kind = PpOpKind::kWaitSend;
        st.ops.push_back(w);
        q.pop_front();
      }
      st.ops.push_back(send);
      q.push_back(send);
    };
    // A computation's receive is posted one computation ahead (before the computation that runs
    // before it), so the transfer proceeds while that one computes; its consumer waits on it alone.
    const std::vector<Step> order = computation_order(spec, s, st);
    auto post_recv_for = [&](const Step& c) {
      const int g = sch.global_chunk(s, c.chunk);
      if (c.forward && g > 0) st.ops.push_back({PpOpKind::kPostRecv, c.mb, c.chunk, Payload::kActivation, (g - 1) % P});
      if (!c.forward && g < G - 1)
        st.ops.push_back({PpOpKind::kPostRecv, c.mb, c.chunk, Payload::kGradient, (g + 1) % P});
    };
    if (!order.empty()) post_recv_for(order[0]);
    for (size_t k = 0; k < order.size(); k++) {
      const Step& c = order[k];
      if (k + 1 < order.size()) post_recv_for(order[k + 1]);
      const int g = sch.global_chunk(s, c.chunk);
      if (c.forward) {
        st.ops.push_back({PpOpKind::kForward, c.mb, c.chunk});
        if (g < G - 1) post_send({PpOpKind::kPostSend, c.mb, c.chunk, Payload::kActivation, (g + 1) % P});
      } else {
        st.ops.push_back({PpOpKind::kBackward, c.mb, c.chunk});
        if (g > 0) post_send({PpOpKind::kPostSend, c.mb, c.chunk, Payload::kGradient, (g - 1) % P});
      }
    }
    for (auto& [key, q] : in_flight)  // the end of the step: every send completes
      for (PpOp w : q) {
        w.kind = PpOpKind::kWaitSend;
        st.ops.push_back(w);
      }
  }
  return sch;
}

std::string to_string(const PpOp& op) {
  const char* p = op.payload == Payload::kActivation ? "A" : "G";
  switch (op.kind) {
    case PpOpKind::kForward: return fmt::format("F{}.{}", op.mb, op.chunk);
    case PpOpKind::kBackward: return fmt::format("B{}.{}", op.mb, op.chunk);
    case PpOpKind::kPostRecv: return fmt::format("r{}{}.{}<{}", p, op.mb, op.chunk, op.peer);
    case PpOpKind::kPostSend: return fmt::format("s{}{}.{}>{}", p, op.mb, op.chunk, op.peer);
    case PpOpKind::kWaitSend: return fmt::format("w{}{}.{}>{}", p, op.mb, op.chunk, op.peer);
  }
  return "?";
}

}  // namespace ms
