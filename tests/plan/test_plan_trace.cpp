// test_plan_trace: the predicted step as a Chrome trace: one process per stage, every forward and
// backward of every micro-batch once on the compute track, every transfer on the send track, the
// pipeline's slices ending at the simulated pipeline time and the last slice at the step time.
#include <gtest/gtest.h>

#include <map>

#include "plan/plan_trace.h"

using namespace ms;
using namespace ms::plan;

TEST(PlanTrace, EverySpanOnceEndingAtTheStep) {
  ModelConfig m;
  m.n_layer = 8, m.n_embd = 1024, m.n_head = 16, m.vocab_size = 50257, m.max_seq_len = 1024;
  PlanLayout l;
  l.tp = 2, l.pp = 2, l.dp = 2, l.micro_batch = 1, l.global_batch = 8, l.seq = 1024;
  const StepPrediction p = predict_step(m, l, builtin_cluster("a100-80g"), PlanConstants{});
  const nlohmann::json t = plan_trace(p, 2);
  std::map<std::pair<int, int>, int> slices;  // (pid, tid) -> count
  double end_pipeline = 0, end = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    slices[{e["pid"].get<int>(), e["tid"].get<int>()}]++;
    const double stop = e["ts"].get<double>() + e["dur"].get<double>();
    if (e["tid"].get<int>() < 2) end_pipeline = std::max(end_pipeline, stop);
    end = std::max(end, stop);
  }
  const int m_per_replica = 8 / (2 * 1);
  for (int s = 0; s < 2; s++) EXPECT_EQ((slices[{s, 0}]), 2 * m_per_replica) << s;  // forward + backward each
  EXPECT_EQ((slices[{0, 1}]), m_per_replica);                                       // activations sent on
  EXPECT_EQ((slices[{1, 1}]), m_per_replica);                                       // gradients sent back
  EXPECT_NEAR(end_pipeline, p.timeline.step_s * 1e6, 1e-3);
  EXPECT_NEAR(end, p.step_s * 1e6, 1e-3);
  EXPECT_TRUE(t["otherData"]["predicted"].get<bool>());
}
