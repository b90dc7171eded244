// test_straggler_runs: straggler detection on real 4-rank runs (dp = 4 under `megascale launch`,
// 4 ranks on this machine's cores): with MEGASCALE_FAULT slowing rank 2's forward by 20%, the log's
// summary at step 20 and `megascale heatmap` (both at a 10% margin, layout_runs.h) name rank 2 (and only rank 2) as a chronic
// straggler in forward; a clean run of the same length names nobody (one-off stalls may be listed,
// as such). Also the summary lines (min / median / max per segment with the rank of the max).
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

#include "common/layout_runs.h"  // LayoutRuns, launch
#include "common/test_util.h"

namespace {

using namespace ms::testing;

// The ranks named in "straggler: rank N ..." lines of a text.
std::set<int> named(const std::string& text, const std::string& prefix) {
  std::set<int> out;
  const std::regex re(prefix + "rank ([0-9]+) ");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.insert(std::stoi((*it)[1]));
  return out;
}

class StragglerRuns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runs_ = new LayoutRuns("ms_straggler_runs", straggler_config(20)); }
  static void TearDownTestSuite() { delete runs_; }
  static LayoutRuns* runs_;
};
LayoutRuns* StragglerRuns::runs_ = nullptr;

TEST_F(StragglerRuns, AnInjectedSlowRankIsNamedByTheLogAndTheHeatmap) {
  const std::string out = runs_->train("MEGASCALE_FAULT='slow:rank=2:seg=forward:ratio=0.2' " + launch(4), "slow", "");
  EXPECT_NE(out.find("fault injected"), std::string::npos) << out;
  // The log: rank 2, forward, chronic, and nobody else.
  EXPECT_EQ(named(out, "straggler: "), std::set<int>({2})) << out;
  EXPECT_NE(out.find("straggler: rank 2 (pp=0 dp=2 tp=0) forward"), std::string::npos) << out;
  // The summary: every segment's min/median/max with the rank of the max, each 10 steps.
  EXPECT_NE(out.find("steps 1-20, ms per step min/median/max across 4 rank(s): step "), std::string::npos) << out;
  EXPECT_NE(out.find("dp-reduce-scatter "), std::string::npos) << out;
  // The heatmap tool over the run's records.
  const CmdResult h = run_cmd(megascale_bin() + " heatmap " + runs_->dir() + "/slow --window 20 --margin 0.1");
  ASSERT_EQ(h.code, 0) << h.output;
  EXPECT_EQ(named(h.output, "straggler: "), std::set<int>({2})) << h.output;
  EXPECT_NE(h.output.find("forward"), std::string::npos) << h.output;
  EXPECT_NE(h.output.find("chronic"), std::string::npos) << h.output;
  EXPECT_TRUE(std::filesystem::exists(runs_->dir() + "/slow/heatmap/heatmap.html")) << h.output;
}

TEST_F(StragglerRuns, ACleanRunNamesNobody) {
  const std::string out = runs_->train(launch(4), "clean", "");
  EXPECT_EQ(named(out, "straggler: "), std::set<int>()) << out;
  EXPECT_NE(out.find("steps 1-20, ms per step"), std::string::npos) << out;
  const CmdResult h = run_cmd(megascale_bin() + " heatmap " + runs_->dir() + "/clean --window 20 --margin 0.1");
  ASSERT_EQ(h.code, 0) << h.output;
  EXPECT_EQ(named(h.output, "straggler: "), std::set<int>()) << h.output;
  EXPECT_NE(h.output.find("no stragglers"), std::string::npos) << h.output;
}

}  // namespace
