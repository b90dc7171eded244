// test_rank_grid: the pure layout arithmetic of RankLayout (no processes), and RankGrid on the
// self backend. Sub-groups on real backends are checked by test_comm (comm_check --grid).
#include <gtest/gtest.h>

#include <set>

#include "comm/comm_env.h"
#include "comm/rank_grid.h"
#include "comm/world.h"

namespace ms {
namespace {

constexpr ParallelDim kDims[3] = {ParallelDim::kTp, ParallelDim::kDp, ParallelDim::kPp};

TEST(RankLayoutTest, TpDpPpPutsTpGroupsOnConsecutiveRanks) {
  RankLayout l("tp-dp-pp", {2, 2, 2}, 8);
  EXPECT_EQ(l.all_groups(ParallelDim::kTp), (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l.all_groups(ParallelDim::kDp), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(l.all_groups(ParallelDim::kPp), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // world = tp + 2*(dp + 2*pp)
  EXPECT_EQ(l.coord(5), (GridCoord{1, 0, 1}));
  EXPECT_EQ(l.world_rank({1, 1, 1}), 7);
  EXPECT_EQ(l.group(ParallelDim::kDp, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(l.group_name(ParallelDim::kDp, 3), "dp[tp=1,pp=0]");
  EXPECT_EQ(l.group_name(ParallelDim::kTp, 6), "tp[dp=1,pp=1]");
  EXPECT_EQ(l.group_name(ParallelDim::kPp, 2), "pp[tp=0,dp=1]");
  EXPECT_EQ(l.order_string(), "tp-dp-pp");
}

TEST(RankLayoutTest, CoordinatesRoundTripForEveryOrderAndShape) {
  const std::vector<std::string> orders = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp", "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};
  const std::vector<GridShape> shapes = {{1, 1, 1}, {2, 3, 1}, {3, 1, 2}, {2, 2, 2}, {4, 3, 2}, {1, 5, 3}};
  for (const auto& order : orders) {
    for (const GridShape& s : shapes) {
      RankLayout l(order, s, s.product());
      std::set<int> seen;
      for (int w = 0; w < s.product(); w++) {
        const GridCoord c = l.coord(w);
        EXPECT_EQ(l.world_rank(c), w) << order;
        seen.insert(w);
        for (ParallelDim d : kDims) {
          const auto g = l.group(d, w);
          ASSERT_EQ(static_cast<int>(g.size()), s.size(d));
          EXPECT_EQ(g[c[d]], w) << "group rank = coordinate along the dimension";
          for (int i = 0; i < s.size(d); i++) {
            GridCoord o = l.coord(g[i]);
            EXPECT_EQ(o[d], i);
            o[d] = c[d];
            EXPECT_EQ(o, c) << "members differ only along " << parallel_dim_name(d);
          }
        }
      }
      EXPECT_EQ(static_cast<int>(seen.size()), s.product());
      // The groups of one dimension partition the world.
      for (ParallelDim d : kDims) {
        std::set<int> all;
        for (const auto& g : l.all_groups(d)) all.insert(g.begin(), g.end());
        EXPECT_EQ(static_cast<int>(all.size()), s.product());
        EXPECT_EQ(static_cast<int>(l.all_groups(d).size()), s.product() / s.size(d));
      }
      // The innermost dimension varies fastest.
      const ParallelDim inner = l.order()[0];
      if (s.size(inner) > 1) {
        EXPECT_EQ(l.coord(1)[inner], 1) << order;
      }
    }
  }
}

TEST(RankLayoutTest, OmittedDimensionsMustHaveSizeOne) {
  RankLayout l("dp", {1, 4, 1}, 4);
  EXPECT_EQ(l.order_string(), "dp");
  EXPECT_EQ(l.all_groups(ParallelDim::kDp), (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_EQ(l.group_name(ParallelDim::kDp, 2), "dp[tp=0,pp=0]");
  EXPECT_THROW(RankLayout("dp", {2, 2, 1}, 4), Error);
}

TEST(RankLayoutTest, BadLayoutsAreNamed) {
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message([] { RankLayout("tp-dp-pp", {2, 2, 2}, 6); });
  EXPECT_NE(m.find("= 8"), std::string::npos) << m;
  EXPECT_NE(m.find("world size 6"), std::string::npos) << m;
  m = message([] { RankLayout("tp-cp-pp", {1, 1, 1}, 1); });
  EXPECT_NE(m.find("'cp'"), std::string::npos) << m;
  m = message([] { RankLayout("tp-dp-tp", {1, 1, 1}, 1); });
  EXPECT_NE(m.find("twice"), std::string::npos) << m;
  EXPECT_THROW(RankLayout("", {1, 1, 1}, 1), Error);
  EXPECT_THROW(RankLayout("tp--dp", {1, 1, 1}, 1), Error);
  EXPECT_THROW(RankLayout("tp-dp-pp", {0, 1, 1}, 0), Error);
  RankLayout ok("tp-dp-pp", {2, 1, 1}, 2);
  EXPECT_THROW(ok.coord(2), Error);
  EXPECT_THROW(ok.world_rank({2, 0, 0}), Error);
}

TEST(RankGridTest, SelfBackendHasGroupsOfOne) {
  RankGrid grid(init_world(CommEnv{}), "tp-dp-pp", {1, 1, 1});
  EXPECT_EQ(grid.world().size(), 1);
  EXPECT_EQ(grid.tp().name(), "tp[dp=0,pp=0]");
  EXPECT_EQ(grid.dp().name(), "dp[tp=0,pp=0]");
  EXPECT_EQ(grid.pp().size(), 1);
  EXPECT_EQ(grid.coord(), (GridCoord{0, 0, 0}));
  float x = 3;
  grid.dp().all_reduce(&x, 1, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(x, 3);
  EXPECT_THROW(RankGrid(init_world(CommEnv{}), "tp-dp-pp", {2, 1, 1}), Error);
}

}  // namespace
}  // namespace ms
