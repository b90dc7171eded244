// test_step_sim: the timed pipeline over the runtime's schedule tables against closed forms:
//  - uniform forward f and backward b, no communication: 1F1B takes (m + p - 1)(f + b) (Narayanan
//    et al.), interleaved (m v + p - 1)(f + b) per chunk costs, i.e. (m + (p-1)/v) micro-batch times,
//    so every stage waits (p-1)/(v m) of its compute (the bubble the trainer prints); one stage: m (f + b);
//  - with transfers of c each: a single micro-batch crosses every boundary twice, 2 (p-1) c more;
//    decoupled send/recv is never slower than paired, and paired is slower once transfers cost;
//  - the last stage made slower paces the whole pipeline: (m + p - 1) steps of the slowest stage's
//    f + b, at least;
//  - costs that do not match the schedule are named.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "parallel/pp/pp_schedule.h"
#include "plan/step_sim.h"

using namespace ms;
using namespace ms::plan;

namespace {

PipelineSchedule schedule(int p, int v, int m) {
  ScheduleSpec s;
  s.kind = v > 1 ? PipelineScheduleKind::kInterleaved : PipelineScheduleKind::k1F1B;
  s.stages = p, s.virtual_stages = v, s.micro_batches = m;
  validate_schedule(s);
  return build_schedule(s);
}

TEST(StepSim, UniformCostsGiveTheBubbleClosedForm) {
  const double f = 1.0, b = 2.0;
  for (int p : {1, 2, 4, 8})
    for (int m : {1, 4, 8, 16}) {
      const PipelineSchedule sch = schedule(p, 1, m);
      const PipelineTimeline t = simulate_pipeline(sch, PipelineCosts::uniform(sch.spec, f, b));
      EXPECT_DOUBLE_EQ(t.step_s, (m + p - 1) * (f + b)) << "p " << p << " m " << m;
      for (int s = 0; s < p; s++) EXPECT_DOUBLE_EQ(t.wait_s[s] / t.compute_s[s], (p - 1.0) / m);
    }
  for (int p : {2, 4})
    for (int v : {2, 3})
      for (int m : {p, 2 * p, 4 * p}) {
        const PipelineSchedule sch = schedule(p, v, m);
        const PipelineTimeline t = simulate_pipeline(sch, PipelineCosts::uniform(sch.spec, f / v, b / v));
        EXPECT_NEAR(t.step_s, (m + (p - 1.0) / v) * (f + b), 1e-9) << "p " << p << " v " << v << " m " << m;
        EXPECT_NEAR(t.wait_s[0] / t.compute_s[0], (p - 1.0) / (v * m), 1e-9);
      }
}

TEST(StepSim, TransfersAddToTheCriticalPathAndDecouplingHidesThem) {
  const double f = 1.0, b = 2.0, c = 0.25;
  for (int p : {2, 4}) {
    const PipelineSchedule one = schedule(p, 1, 1);
    EXPECT_DOUBLE_EQ(simulate_pipeline(one, PipelineCosts::uniform(one.spec, f, b, c)).step_s,
                     p * (f + b) + 2 * (p - 1) * c);
    const PipelineSchedule sch = schedule(p, 1, 8);
    PipelineCosts dec = PipelineCosts::uniform(sch.spec, f, b, c), pair = dec;
    pair.decoupled = false;
    const double td = simulate_pipeline(sch, dec).step_s, tp = simulate_pipeline(sch, pair).step_s;
    EXPECT_GE(td, (8 + p - 1) * (f + b) + 2 * (p - 1) * c - 1e-9);  // fill and drain cross every boundary
    EXPECT_LT(td, tp);
  }
}

TEST(StepSim, TheSlowestStagePacesThePipeline) {
  const PipelineSchedule sch = schedule(4, 1, 8);
  PipelineCosts c = PipelineCosts::uniform(sch.spec, 1.0, 2.0);
  c.forward[3][0] = 1.5, c.backward[3][0] = 3.0;  // the LM head's stage
  const PipelineTimeline t = simulate_pipeline(sch, c);
  EXPECT_GE(t.step_s, 8 * 4.5 + 3 * 3.0 - 1e-9);
  EXPECT_DOUBLE_EQ(t.compute_s[3], 8 * 4.5);
}

TEST(StepSim, CostsThatDoNotFitTheScheduleAreNamed) {
  const PipelineSchedule sch = schedule(2, 1, 4);
  PipelineCosts c = PipelineCosts::uniform(sch.spec, 1.0, 2.0);
  c.forward.pop_back();
  ms::testing::expect_error([&] { simulate_pipeline(sch, c); }, {"pipeline costs for 1 / 2 stages"});
}

}  // namespace
