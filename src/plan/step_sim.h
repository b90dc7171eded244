// step_sim: one training step's pipeline, timed — a discrete-event simulation over the RUNTIME'S OWN
// schedule table (parallel/pp/pp_schedule.h), so planner and trainer cannot disagree on the order of
// computations and transfers. Every stage runs its op list in order on its own clock:
//  - a computation (forward or backward of one micro-batch on one local chunk) starts when the stage
//    is free and the message it consumes has arrived, and takes its given time;
//  - a send starts when posted and its stage's outgoing link is free (one link per stage, transfers
//    in posting order; eager: the runtime posts every receive a computation ahead) and occupies the
//    link for the payload's transfer time; a wait-for-send waits for it;
//  - paired send/recv (decoupled = false, Megatron's): before each computation the stage also waits
//    for every send posted since its last computation, as the runtime does.
// The bubble is not a term: it falls out (tests: uniform costs without communication give Megatron's
// (m + (p-1)/v) x the per-micro-batch time). Returns per-stage compute and wait, and every span for a
// trace.
#pragma once
#include <vector>

#include "parallel/pp/pp_schedule.h"  // PipelineSchedule, PpOpKind

namespace ms::plan {

struct PipelineCosts {
  // Seconds per micro-batch, [stage][local chunk].
  std::vector<std::vector<double>> forward, backward;
  double activation_s = 0;  // one activation's transfer to the next stage
  double gradient_s = 0;    // one gradient's transfer to the previous stage
  bool decoupled = true;
  // Uniform costs: every stage and chunk the same.
  static PipelineCosts uniform(const ScheduleSpec& spec, double forward_s, double backward_s, double transfer_s = 0);
};

struct SimSpan {
  int stage = 0;
  PpOpKind kind = PpOpKind::kForward;  // kForward, kBackward, or kPostSend for a transfer
  int mb = 0, chunk = 0;
  double t0 = 0, t1 = 0;
};

struct PipelineTimeline {
  double step_s = 0;              // the last stage to finish
  std::vector<double> compute_s;  // per stage
  std::vector<double> wait_s;     // per stage: step_s - compute_s (waiting on messages, sends, the bubble)
  std::vector<SimSpan> spans;
};

// Throws when the costs do not match the schedule's shape, or (never for a checked schedule) on a
// deadlock.
PipelineTimeline simulate_pipeline(const PipelineSchedule& sch, const PipelineCosts& costs);

}  // namespace ms::plan
