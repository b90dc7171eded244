// test_placement: the run log's placement lines (comm/placement.h) from a layout and each rank's
// host: one line per host with its ranks' (tp, dp, pp) labels in rank order, nothing for one host, and
// a warning for each tensor-parallel group that spans hosts (MegaScale keeps TP inside a host).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/placement.h"

namespace ms {
namespace {

TEST(Placement, OneHostSaysNothing) {
  const RankLayout lay("tp-dp-pp", GridShape{2, 2, 1}, 4);
  const PlacementReport r = placement_report(lay, {"a", "a", "a", "a"});
  EXPECT_TRUE(r.lines.empty());
  EXPECT_TRUE(r.warnings.empty());
}

TEST(Placement, TpInsideHostsListsEachHostsRanks) {
  const RankLayout lay("tp-dp-pp", GridShape{2, 2, 1}, 4);
  const PlacementReport r = placement_report(lay, {"10.0.0.1", "10.0.0.1", "10.0.0.2", "10.0.0.2"});
  ASSERT_EQ(r.lines.size(), 2u);
  EXPECT_EQ(r.lines[0], "host 10.0.0.1: ranks 0 (" + lay.rank_label(0) + "), 1 (" + lay.rank_label(1) + ")");
  EXPECT_EQ(r.lines[1], "host 10.0.0.2: ranks 2 (" + lay.rank_label(2) + "), 3 (" + lay.rank_label(3) + ")");
  EXPECT_NE(lay.rank_label(1).find("tp=1"), std::string::npos);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(Placement, TpAcrossHostsIsWarnedOncePerGroup) {
  const RankLayout lay("tp-dp-pp", GridShape{2, 2, 1}, 4);
  const PlacementReport r = placement_report(lay, {"a", "b", "a", "b"});  // each TP pair split
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_NE(r.warnings[0].find(lay.group_name(ParallelDim::kTp, 0)), std::string::npos) << r.warnings[0];
  EXPECT_NE(r.warnings[0].find("spans 2 hosts (a, b)"), std::string::npos) << r.warnings[0];
  // dp outermost-but-one with tp innermost across 2 ranks per host: DP and PP cross hosts, TP does not.
  const RankLayout lay3("tp-dp-pp", GridShape{2, 1, 2}, 4);
  EXPECT_TRUE(placement_report(lay3, {"a", "a", "b", "b"}).warnings.empty());
}

}  // namespace
}  // namespace ms
