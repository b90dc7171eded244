// test_straggler: the straggler judgment (obs/straggler.h) on synthetic tables of known truth, with
// the default margin and window: a rank whose compute lost CPU time (+15% wall time, equal CPU
// time) is named on "compute"; a rank doing extra work (+15% CPU time) is named on its segment
// (and not again on "compute"); a clean set with +-5% noise names nobody; peers are per pipeline
// stage (a stage twice as slow as the other is no straggler; a slow rank in it is named against
// its own stage); a rank that waited longer than its peers was not the one waited for. Also
// straggler_table over record files: CPU time per segment, the wall-time "compute" row, the waits
// (and step_segment_table, the heatmaps' input, in wall time).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "common/test_util.h"  // TestRng
#include "obs/record_reader.h"
#include "obs/straggler.h"
#include "obs/straggler_table.h"

namespace {

using namespace ms;

// A table of `stages` x `per_stage` ranks (stage = rank / per_stage) over `steps` steps with rows
// forward, backward, optimizer (CPU ms) and compute (wall ms), and waits. Every cell is its base
// value x stage_scale[stage] x (1 + uniform(-noise, noise)).
struct Synth {
  int stages = 2, per_stage = 4, steps = kStragglerWindow;
  double noise = 0.05;
  std::vector<double> stage_scale = {1.0, 1.0};
  uint64_t seed = 11;
  // What each rank does: its CPU time per segment and its lost (descheduled) fraction of wall time.
  std::vector<double> cpu_factor, lost;  // per rank (default 1 and 0)
  std::vector<double> wait_factor;       // per rank: x its wait (default: a straggler waits less)

  SegmentTable make() {
    const int n = stages * per_stage;
    cpu_factor.resize(n, 1.0), lost.resize(n, 0.0), wait_factor.resize(n, -1.0);
    SegmentTable t;
    for (int r = 0; r < n; r++) t.ranks.push_back(r), t.peer_class.push_back(r / per_stage);
    for (int s = 0; s < steps; s++) t.steps.push_back(100 + s);
    t.segments = {"forward", "backward", "optimizer", kComputeSegment};
    t.resize_nan();
    t.resize_wait_nan();
    ms::testing::TestRng rng(seed);
    const double base[3] = {20.0, 40.0, 5.0};  // ms
    for (int r = 0; r < n; r++)
      for (int c = 0; c < steps; c++) {
        const double scale = stage_scale[static_cast<size_t>(r / per_stage)];
        double wall = 0, extra = 0;
        for (int g = 0; g < 3; g++) {
          const double cpu = base[g] * scale * cpu_factor[r] * (1 + noise * rng.uniform());
          t.at(r, c, g) = cpu;
          const double w = cpu / (1 - lost[r]);  // lost CPU time: the wall time grows, the CPU time does not
          wall += w;
          extra += w - base[g] * scale;
        }
        t.at(r, c, 3) = wall;
        // The others wait for the slow one: its wait is the smaller.
        const double wait = 30.0 * (1 + noise * rng.uniform());
        t.wait[r * steps + c] = wait_factor[r] >= 0 ? wait * wait_factor[r] : std::max(0.0, wait - extra);
      }
    return t;
  }
};

std::set<std::string> chronic(const std::vector<Straggler>& v) {
  std::set<std::string> out;
  for (const Straggler& s : v)
    if (s.chronic) out.insert(std::to_string(s.rank) + ":" + s.segment);
  return out;
}

TEST(Straggler, DefaultsAreTheDerivedOnes) {
  const StragglerOptions opt;
  EXPECT_EQ(opt.margin, kStragglerMargin);
  EXPECT_EQ(opt.window, kStragglerWindow);
  EXPECT_GT(kStragglerMargin, 0.05);  // the old 5% sat inside the measured noise
  EXPECT_LT(kStragglerMargin, 0.15);  // a 15% slowdown must stand over it
}

TEST(Straggler, LostCpuTimeIsNamedOnComputeWallTime) {
  Synth s;
  s.lost = {0, 0, 0, 0, 0, 0.13, 0, 0};  // rank 5: wall time / (1 - 0.13) = +15%, CPU time equal
  const std::vector<Straggler> v = find_stragglers(s.make(), StragglerOptions{});
  EXPECT_EQ(chronic(v), std::set<std::string>({"5:compute"}));
  ASSERT_FALSE(v.empty());
  EXPECT_NEAR(v[0].median_excess, 0.15, 0.04);
  EXPECT_EQ(describe(v[0], "rank 5").find("straggler: rank 5 compute +1"), 0u) << describe(v[0], "rank 5");
  EXPECT_NE(describe(v[0], "rank 5").find("in wall time (forward+backward+optimizer)"), std::string::npos);
}

TEST(Straggler, ExtraWorkIsNamedOnItsSegmentOnly) {
  Synth s;
  s.cpu_factor = {1, 1.15, 1, 1, 1, 1, 1, 1};  // rank 1: 15% more work in every segment
  const std::set<std::string> named = chronic(find_stragglers(s.make(), StragglerOptions{}));
  EXPECT_EQ(named, std::set<std::string>({"1:forward", "1:backward", "1:optimizer"}));  // not again on compute
}

TEST(Straggler, CleanSetWithFivePercentNoiseNamesNobody) {
  for (uint64_t seed = 1; seed <= 20; seed++) {
    Synth s;
    s.seed = seed;
    const std::vector<Straggler> v = find_stragglers(s.make(), StragglerOptions{});
    EXPECT_TRUE(chronic(v).empty()) << "seed " << seed << ": " << describe(v[0], "rank");
  }
}

TEST(Straggler, PeersAreThePipelineStage) {
  Synth s;
  s.stage_scale = {1.0, 2.0};  // stage 1 holds the LM head: twice the work, on every rank of it
  EXPECT_TRUE(chronic(find_stragglers(s.make(), StragglerOptions{})).empty());
  Synth t;
  t.stage_scale = {1.0, 2.0};
  t.lost = {0, 0, 0, 0, 0, 0, 0.2, 0};  // rank 6 (stage 1) loses 20% of its wall time
  EXPECT_EQ(chronic(find_stragglers(t.make(), StragglerOptions{})), std::set<std::string>({"6:compute"}));
  // A stage of one rank has no peers: never judged.
  Synth u;
  u.stages = 2, u.per_stage = 1, u.lost = {0.3, 0};
  EXPECT_TRUE(find_stragglers(u.make(), StragglerOptions{}).empty());
}

TEST(Straggler, ARankThatWaitedLongerWasNotWaitedFor) {
  Synth s;
  s.lost = {0, 0, 0.2, 0, 0, 0, 0, 0};
  s.wait_factor = {1, 1, 1.5, 1, 1, 1, 1, 1};  // rank 2's compute is slow, but it waited the longest
  EXPECT_TRUE(chronic(find_stragglers(s.make(), StragglerOptions{})).empty());
  s.wait_factor = {1, 1, 0.5, 1, 1, 1, 1, 1};  // the others waited for it
  EXPECT_EQ(chronic(find_stragglers(s.make(), StragglerOptions{})), std::set<std::string>({"2:compute"}));
}

// straggler_table over record files: per-segment CPU time, the summed wall time, the waits.
TEST(StragglerTable, CpuPerSegmentWallSumAndWaits) {
  RunRecords run;
  run.world = 2;
  for (int r = 0; r < 2; r++) {
    RankRecords rr;
    rr.rank = r;
    rr.has_header = true;
    rr.header.rank = r;
    for (int s = 0; s < 3; s++) {
      RecordedStep st;
      st.step = s;
      st.ms = {{"forward", 10.0 + r}, {"backward", 20.0}, {"wait", 4.0}, {"pp", 1.0}, {"dp-all-gather", 7.0}};
      st.cpu_ms = {{"forward", 9.0}, {"backward", 19.0}};
      rr.steps.push_back(st);
    }
    run.ranks.push_back(rr);
  }
  // The heatmaps' table is in wall time (what the page shows); the judgment's in CPU time per segment.
  EXPECT_EQ(step_segment_table(run, {"forward"}, 0).at(1, 0, 0), 11.0);
  const SegmentTable t = straggler_table(run, 2);
  EXPECT_EQ(t.steps, (std::vector<int>{1, 2}));
  EXPECT_EQ(t.segments, (std::vector<std::string>{"forward", "backward", kComputeSegment}));
  EXPECT_EQ(t.at(1, 0, 0), 9.0);         // CPU time
  EXPECT_EQ(t.at(1, 0, 2), 31.0);        // wall: 11 + 20
  ASSERT_EQ(t.wait.size(), 4u);
  EXPECT_EQ(t.wait[0], 5.0);             // wait + pp, not the collectives' own times
  // Records without CPU times or waits: no compute row, no waits.
  for (RankRecords& rr : run.ranks)
    for (RecordedStep& st : rr.steps) st.cpu_ms.clear(), st.ms.erase("wait"), st.ms.erase("pp");
  const SegmentTable u = straggler_table(run, 0);
  EXPECT_EQ(u.segments, (std::vector<std::string>{"forward", "backward"}));
  EXPECT_EQ(u.at(1, 2, 0), 11.0);
  EXPECT_TRUE(u.wait.empty());
}

}  // namespace
