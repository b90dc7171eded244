// pp_schedule: pipeline-parallel schedules as data (Megatron's get_schedule_table idea): a pure
// function of (schedule kind, stages P, model chunks per stage v, micro-batches m) returns, for
// every stage, the ordered list of operations it issues. Nothing here communicates or computes;
// the tables are checked (pp_simulate.h, tests/parallel/test_pp_schedule) before any process runs
// them.
//  - Chunks: the model's layers form P*v chunks; stage s holds global chunks s, s+P, s+2P, ...
//    (local chunk c = global chunk c*P + s). 1F1B is v = 1.
//  - Order of computations: Megatron's. 1F1B: stage s runs min(P-s-1, m) warm-up forwards, then
//    (m - warm-up) steady forward+backward pairs, then the warm-up's backwards (cool-down).
//    Interleaved: virtual micro-batch k maps to micro-batch (k / (P v)) P + k % P and local chunk
//    (k % (P v)) / P (reversed for backwards); warm-up = min((P-s-1)*2 + (v-1)*P, m v), all of
//    m v when m == P; the rest as 1F1B. Interleaving needs m to be a multiple of P.
//  - Communication is decoupled (MegaScale §3.2): every send and every receive is its own
//    operation. A receive is posted one computation ahead — before the computation that runs
//    before its consumer, so the transfer proceeds meanwhile — and its consumer waits on it alone;
//    a send is posted right after the computation that produced it and is waited on only when its
//    buffer is about to be reused (send_slots buffers per direction and chunk) or at the end of
//    the step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/parallel_config.h"  // PipelineScheduleKind

namespace ms {

struct ScheduleSpec {
  PipelineScheduleKind kind = PipelineScheduleKind::k1F1B;
  int stages = 1;          // P
  int virtual_stages = 1;  // v: model chunks per stage (1 for 1F1B)
  int micro_batches = 1;   // m, per step
  int send_slots = 2;      // send buffers per (direction, local chunk) before a send must be waited on
};

// What flows between stages: a forward's output activation, or a backward's input gradient.
enum class Payload : uint8_t { kActivation, kGradient };

enum class PpOpKind : uint8_t {
  kForward,    // forward of micro-batch mb on local chunk `chunk`
  kBackward,   // backward of micro-batch mb on local chunk `chunk`
  kPostRecv,   // post the receive of `payload` for (mb, chunk) from stage `peer`
  kPostSend,   // post the send of `payload` produced by (mb, chunk) to stage `peer`
  kWaitSend,   // wait until that send has completed (its buffer is reused next, or the step ends)
};

struct PpOp {
  PpOpKind kind = PpOpKind::kForward;
  int mb = 0;      // micro-batch
  int chunk = 0;   // local model chunk (0..v-1) the op belongs to
  Payload payload = Payload::kActivation;  // send / recv / wait only
  int peer = -1;   // send / recv / wait: the other stage
  bool operator==(const PpOp&) const = default;
};

struct StageSchedule {
  std::vector<PpOp> ops;
  int warmup = 0, steady = 0, cooldown = 0;  // computation counts of each phase (steady counts pairs)
};

struct PipelineSchedule {
  ScheduleSpec spec;
  std::vector<StageSchedule> stages;  // indexed by stage
  int global_chunk(int stage, int local_chunk) const { return local_chunk * spec.stages + stage; }
  int num_chunks() const { return spec.stages * spec.virtual_stages; }
};

// Rejects, with a message naming the values, what no schedule can run: P, v, m or slots < 1;
// v > 1 with 1F1B; interleaved with m not a multiple of P; n_layer (when > 0) not divisible by P*v.
void validate_schedule(const ScheduleSpec& spec, int n_layer = 0);

// The schedule of every stage (validate_schedule first).
PipelineSchedule build_schedule(const ScheduleSpec& spec);

// "F3.1" / "B3.1" / "rA3.1<0" / "sG3.1>2" / "wA3.1>2": one op as text (for messages and tests).
std::string to_string(const PpOp& op);

}  // namespace ms
