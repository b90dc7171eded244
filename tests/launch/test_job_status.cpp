// test_job_status: the dashboard's straggler view (launch/job_status.h) on made-up records of a
// dp 2 x pp 2 run whose stage 1 (the LM head) works three times as long as stage 0 and whose rank 1
// loses CPU time (its compute wall time +30%, its CPU time equal, it waits least): each cell's
// peers' median comes from its own stage (the page colours against it, with the colour floor), and
// rank 1 is a chronic straggler on "compute" with its compute cells marked.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "launch/job_status.h"
#include "obs/record_reader.h"
#include "report/heatmap.h"  // kHeatColourFloorMs

namespace {

using namespace ms;

RunRecords stage_run(int steps) {
  RunRecords run;
  run.world = 4;
  for (int r = 0; r < 4; r++) {
    RankRecords rr;
    rr.rank = r;
    rr.has_header = true;
    rr.header.rank = r;
    rr.header.world = 4;
    rr.header.coord = RankCoord{0, r % 2, r / 2};
    rr.header.shape = RankCoord{1, 2, 2};
    const double scale = r / 2 == 1 ? 3.0 : 1.0, lost = r == 1 ? 1.3 : 1.0;
    for (int s = 0; s < steps; s++) {
      RecordedStep st;
      st.step = s;
      st.t0 = s * 1000000000LL, st.t1 = st.t0 + 500000000LL;
      st.cpu_ms = {{"forward", 20 * scale}, {"backward", 40 * scale}};
      st.ms = {{"forward", 20 * scale * lost}, {"backward", 40 * scale * lost}, {"pp-send", 2.0},
               {"wait", r == 0 ? 30.0 : r == 1 ? 12.0 : 20.0}};
      rr.steps.push_back(st);
    }
    run.ranks.push_back(rr);
  }
  return run;
}

TEST(JobStatusStragglers, PeersPerStageAndALostCpuRankMarked) {
  launch::JobStatus js(4);  // the default window and margin (obs/straggler.h)
  js.add_records(stage_run(kStragglerWindow));
  const nlohmann::json st = js.status_json();
  const nlohmann::json& h = st["heatmap"];
  const auto segs = h["segments"].get<std::vector<std::string>>();
  const size_t fwd = std::find(segs.begin(), segs.end(), "forward") - segs.begin();
  ASSERT_LT(fwd, segs.size());
  EXPECT_EQ(h["colour_floor_ms"].get<double>(), kHeatColourFloorMs);
  // Stage 1's cells against stage 1 only: rank 2's peer is rank 3 (60 ms), not stage 0's 20..26 ms.
  EXPECT_NEAR(h["peer_ms"][2][fwd].get<double>(), 60.0, 1e-9);
  EXPECT_NEAR(h["peer_ms"][0][fwd].get<double>(), 26.0, 1e-9);  // rank 1's wall time
  EXPECT_NEAR(h["ms"][3][fwd].get<double>(), 60.0, 1e-9);
  // Rank 1: chronic on compute (wall), not on the CPU-time segments; its compute cells marked.
  int chronic = 0;
  for (const auto& s : st["stragglers"])
    if (s["chronic"].get<bool>()) {
      chronic++;
      EXPECT_EQ(s["rank"], 1) << s.dump();
      EXPECT_EQ(s["segment"], kComputeSegment) << s.dump();
    }
  EXPECT_EQ(chronic, 1) << st["stragglers"].dump(1);
  for (size_t k = 0; k < segs.size(); k++) {
    const bool compute = segs[k] == "forward" || segs[k] == "backward";
    EXPECT_EQ(h["straggler"][1][k].get<bool>(), compute) << segs[k];
    EXPECT_FALSE(h["straggler"][0][k].get<bool>()) << segs[k];
  }
}

}  // namespace
