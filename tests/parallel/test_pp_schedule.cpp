// test_pp_schedule: the pipeline schedule tables (parallel/pp/pp_schedule.h), checked before any
// process runs them: every shape (P = 1..4 stages; 1F1B with m = 1..8 micro-batches; interleaved
// with v = 2, 3 and m a multiple of P) passes check_schedule (one forward and one backward per
// micro-batch and chunk, forward first; every send matched by one receive on its peer, channels in
// order; every send waited on) and runs to the end on the simulated network with unbounded and
// with zero (rendezvous) buffering, for 1 and 2 send buffers; warm-up / steady / cool-down lengths
// equal Megatron's formulas; one small table is spelled out; invalid shapes are refused by name;
// and the checks themselves catch what they are for: a blocking send after every post deadlocks
// the interleaved table under zero buffering (1F1B survives it: receives are posted one
// computation ahead), a missing receive and a backward before its forward are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "parallel/pp/pp_schedule.h"
#include "parallel/pp/pp_simulate.h"

using namespace ms;

namespace {

std::vector<ScheduleSpec> every_shape() {
  std::vector<ScheduleSpec> out;
  for (int P = 1; P <= 4; P++) {
    for (int m = 1; m <= 8; m++)
      for (int slots : {1, 2}) out.push_back({PipelineScheduleKind::k1F1B, P, 1, m, slots});
    for (int v : {2, 3})
      for (int m = P; m <= 4 * P; m += P)
        for (int slots : {1, 2}) out.push_back({PipelineScheduleKind::kInterleaved, P, v, m, slots});
  }
  return out;
}

std::string name(const ScheduleSpec& s) {
  return std::string(config_name(s.kind)) + " P=" + std::to_string(s.stages) + " v=" + std::to_string(s.virtual_stages) +
         " m=" + std::to_string(s.micro_batches) + " slots=" + std::to_string(s.send_slots);
}

TEST(PpSchedule, EveryShapeIsConsistentAndRunsWithAnyBuffering) {
  for (const ScheduleSpec& s : every_shape()) {
    const PipelineSchedule sch = build_schedule(s);
    EXPECT_NO_THROW(check_schedule(sch)) << name(s);
    for (Buffering b : {Buffering::kUnbounded, Buffering::kZero}) {
      const SimResult r = simulate_schedule(sch, b);
      EXPECT_FALSE(r.deadlock) << name(s) << (b == Buffering::kZero ? " zero" : " unbounded") << " buffering: " << r.stuck;
    }
  }
}

// Megatron's phase lengths (schedules.py), restated: 1F1B warm-up = min(P - s - 1, m); interleaved
// warm-up = min(2 (P - s - 1) + (v - 1) P, m v), or m v when m == P; steady = m v - warm-up pairs;
// cool-down = warm-up backwards.
TEST(PpSchedule, PhaseLengthsAreMegatrons) {
  for (const ScheduleSpec& s : every_shape()) {
    const PipelineSchedule sch = build_schedule(s);
    const int P = s.stages, v = s.virtual_stages, m = s.micro_batches;
    for (int st = 0; st < P; st++) {
      int w = s.kind == PipelineScheduleKind::k1F1B ? std::min(P - st - 1, m)
              : m == P ? m * v
                       : std::min(2 * (P - st - 1) + (v - 1) * P, m * v);
      EXPECT_EQ(sch.stages[st].warmup, w) << name(s) << " stage " << st;
      EXPECT_EQ(sch.stages[st].steady, m * v - w) << name(s) << " stage " << st;
      EXPECT_EQ(sch.stages[st].cooldown, w) << name(s) << " stage " << st;
      // The computations appear in that shape: w forwards first, then alternating, then backwards.
      std::string shape;
      for (const PpOp& op : sch.stages[st].ops)
        if (op.kind == PpOpKind::kForward || op.kind == PpOpKind::kBackward) shape += op.kind == PpOpKind::kForward ? 'F' : 'B';
      std::string want = std::string(w, 'F');
      for (int k = 0; k < m * v - w; k++) want += "FB";
      want += std::string(w, 'B');
      EXPECT_EQ(shape, want) << name(s) << " stage " << st;
    }
  }
}

TEST(PpSchedule, TwoStagesThreeMicroBatchesSpelledOut) {
  const PipelineSchedule sch = build_schedule({PipelineScheduleKind::k1F1B, 2, 1, 3, 2});
  auto text = [&](int st) {
    std::string t;
    for (const PpOp& op : sch.stages[st].ops) {
      if (!t.empty()) t += ' ';
      t += to_string(op);
    }
    return t;
  };
  // Stage 0: one warm-up forward; the third activation send reuses the first one's buffer.
  // Each receive is posted one computation ahead of its consumer (rG0 before F1, which precedes B0).
  EXPECT_EQ(text(0), "F0.0 sA0.0>1 rG0.0<1 F1.0 sA1.0>1 B0.0 rG1.0<1 F2.0 wA0.0>1 sA2.0>1 rG2.0<1 B1.0 B2.0 "
                     "wA1.0>1 wA2.0>1");
  // Stage 1 (last): no warm-up; each forward waits only on its own receive, posted during the
  // computation before it.
  EXPECT_EQ(text(1), "rA0.0<0 F0.0 rA1.0<0 B0.0 sG0.0>0 F1.0 rA2.0<0 B1.0 sG1.0>0 F2.0 B2.0 wG0.0>0 sG2.0>0 "
                     "wG1.0>0 wG2.0>0");
}

TEST(PpSchedule, InterleavedChunksFollowTheModelAroundTheStages) {
  // P = 2, v = 2: global chunks 0 (stage 0), 1 (stage 1), 2 (stage 0), 3 (stage 1). Stage 0's
  // local chunk 1 receives activations from stage 1 and stage 1's local chunk 0 sends to stage 0.
  const PipelineSchedule sch = build_schedule({PipelineScheduleKind::kInterleaved, 2, 2, 4, 2});
  bool wrap_recv = false, wrap_send = false;
  for (const PpOp& op : sch.stages[0].ops)
    wrap_recv |= op.kind == PpOpKind::kPostRecv && op.chunk == 1 && op.payload == Payload::kActivation && op.peer == 1;
  for (const PpOp& op : sch.stages[1].ops)
    wrap_send |= op.kind == PpOpKind::kPostSend && op.chunk == 0 && op.payload == Payload::kActivation && op.peer == 0;
  EXPECT_TRUE(wrap_recv);
  EXPECT_TRUE(wrap_send);
  // The first stage starts with micro-batches 0, 1 on chunk 0, then 0, 1 on chunk 1 (Megatron's order).
  std::vector<std::string> first;
  for (const PpOp& op : sch.stages[0].ops)
    if (op.kind == PpOpKind::kForward && first.size() < 4) first.push_back(to_string(op));
  EXPECT_EQ(first, (std::vector<std::string>{"F0.0", "F1.0", "F0.1", "F1.1"}));
}

TEST(PpSchedule, InvalidShapesAreRefusedByName) {
  ms::testing::expect_error([] { validate_schedule({PipelineScheduleKind::kInterleaved, 2, 2, 3, 2}); },
                            {"interleaved needs micro-batches (3) to be a multiple of the pipeline stages (2)"});
  ms::testing::expect_error([] { validate_schedule({PipelineScheduleKind::k1F1B, 2, 1, 4, 2}, 5); },
                            {"5 layers do not split into 2 stages x 1 virtual stages"});
  ms::testing::expect_error([] { validate_schedule({PipelineScheduleKind::kInterleaved, 2, 2, 4, 2}, 6); },
                            {"6 layers do not split into 2 stages x 2 virtual stages"});
  ms::testing::expect_error([] { validate_schedule({PipelineScheduleKind::k1F1B, 2, 2, 4, 2}); },
                            {"1f1b runs one model chunk per stage (virtual_stages=2)"});
  ms::testing::expect_error([] { build_schedule({PipelineScheduleKind::k1F1B, 0, 1, 4, 2}); }, {"stages=0"});
}

// The checks catch what they are for.
TEST(PpSchedule, ChecksCatchBlockingSendsMissingReceivesAndBackwardFirst) {
  PipelineSchedule sch = build_schedule({PipelineScheduleKind::k1F1B, 2, 1, 2, 2});
  // Paired / blocking sends (wait right after every post). With receives posted one computation
  // ahead, 1F1B survives them even with rendezvous buffering; the interleaved table does not:
  // both stages block sending a gradient of chunk 1 that the other will only receive after its own
  // blocked send (none with unbounded buffering).
  auto blocking_of = [](PipelineSchedule b) {
    for (StageSchedule& st : b.stages) {
      std::vector<PpOp> ops;
      for (const PpOp& op : st.ops) {
        if (op.kind == PpOpKind::kWaitSend) continue;
        ops.push_back(op);
        if (op.kind == PpOpKind::kPostSend) {
          PpOp w = op;
          w.kind = PpOpKind::kWaitSend;
          ops.push_back(w);
        }
      }
      st.ops = ops;
    }
    return b;
  };
  EXPECT_FALSE(simulate_schedule(blocking_of(sch), Buffering::kZero).deadlock);
  const PipelineSchedule blocking = blocking_of(build_schedule({PipelineScheduleKind::kInterleaved, 2, 2, 4, 2}));
  EXPECT_NO_THROW(check_schedule(blocking));
  EXPECT_FALSE(simulate_schedule(blocking, Buffering::kUnbounded).deadlock);
  const SimResult r = simulate_schedule(blocking, Buffering::kZero);
  EXPECT_TRUE(r.deadlock);
  EXPECT_NE(r.stuck.find("stage 0 at wG0.1>1"), std::string::npos) << r.stuck;
  EXPECT_NE(r.stuck.find("stage 1 at wG1.1>0"), std::string::npos) << r.stuck;

  PipelineSchedule missing = sch;
  auto& ops1 = missing.stages[1].ops;
  ops1.erase(std::find_if(ops1.begin(), ops1.end(), [](const PpOp& o) { return o.kind == PpOpKind::kPostRecv; }));
  ms::testing::expect_error([&] { check_schedule(missing); }, {"received 0 time(s)"});
  EXPECT_TRUE(simulate_schedule(missing, Buffering::kUnbounded).deadlock);

  PipelineSchedule backward_first = sch;
  auto& ops0 = backward_first.stages[0].ops;
  const auto f = std::find_if(ops0.begin(), ops0.end(), [](const PpOp& o) { return o.kind == PpOpKind::kForward; });
  const auto b = std::find_if(ops0.begin(), ops0.end(), [](const PpOp& o) { return o.kind == PpOpKind::kBackward; });
  std::iter_swap(f, b);
  ms::testing::expect_error([&] { check_schedule(backward_first); }, {"stage 0 runs B0.0 before its forward"});
}

}  // namespace
