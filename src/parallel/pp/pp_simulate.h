// pp_simulate: checks of a pipeline schedule (pp_schedule.h) before any process runs it.
//  - check_schedule: every (micro-batch, chunk) of every stage has one forward and one backward,
//    the forward first; every send is matched by exactly one receive on its peer (same payload,
//    micro-batch and chunk boundary) and vice versa; per (sender, receiver, payload) channel the
//    sends are posted in the order the receives are; each send is waited on once, after its post.
//    Throws ms::Error naming the stage and the op.
//  - simulate_schedule: runs every stage's list in order on a simulated network. Posting never
//    blocks; a computation waits for the receive it consumes, a wait for its send. A receive
//    completes once its send is posted; a send completes when posted (unbounded buffering) or
//    only once its receive is posted too (zero buffering: rendezvous). Reports a deadlock with
//    the op each stuck stage waits on.
#pragma once
#include <string>
#include <tuple>

#include "parallel/pp/pp_schedule.h"

namespace ms {

enum class Buffering : uint8_t { kUnbounded, kZero };

// A message between stages: its payload, micro-batch, the sending global chunk, the receiving stage.
using PpMessage = std::tuple<Payload, int, int, int>;
// The message a kPostSend / kWaitSend of `stage` sends, and the one a kPostRecv receives.
PpMessage sent_message(const PipelineSchedule& sch, int stage, const PpOp& op);
PpMessage received_message(const PipelineSchedule& sch, int stage, const PpOp& op);
// The message a computation of `stage` consumes (its input activation or output gradient): false
// for the first chunk's forward and the last chunk's backward.
bool consumed_message(const PipelineSchedule& sch, int stage, const PpOp& op, PpMessage& msg);

struct SimResult {
  bool deadlock = false;
  std::string stuck;  // "stage 0 at wA3.0>1 (op 12); stage 1 at ..." when deadlocked
  int rounds = 0;     // sweeps over the stages until done (or stuck)
};

void check_schedule(const PipelineSchedule& sch);
SimResult simulate_schedule(const PipelineSchedule& sch, Buffering buffering);

}  // namespace ms
