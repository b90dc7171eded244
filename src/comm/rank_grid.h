// rank_grid: where each rank sits in the tensor x data x pipeline parallel grid, and the one place
// that creates the process groups.
// RankLayout is the pure part (no processes): an order string such as "tp-dp-pp" names the
// dimensions from innermost (fastest varying in the world rank) to outermost, so with "tp-dp-pp" a
// TP group is consecutive world ranks (one machine) and world = tp + TP*(dp + DP*pp). Any
// permutation of a subset of {tp, dp, pp} is allowed; dimensions left out must have size 1 and
// count as outermost. Unknown or repeated names, sizes < 1 and a product that differs from the
// world size are errors naming what is wrong. Group ranks follow the coordinate along the group's
// dimension; groups are named "dp[tp=1,pp=0]" (the other dimensions, in order-string order).
// RankGrid owns the world communicator and creates this rank's tp, dp and pp groups, once, in that
// order on every rank (after labelling the world's ranks with their coordinates, so every error
// naming a peer names its place in the grid), then (pp > 1, first and last stage only) the tied embedding's group (no
// component creates its own communicator).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace ms {

enum class ParallelDim : uint8_t { kTp = 0, kDp = 1, kPp = 2 };
const char* parallel_dim_name(ParallelDim d);  // "tp", "dp", "pp"

// Sizes of the grid's dimensions.
struct GridShape {
  int tp = 1, dp = 1, pp = 1;
  int size(ParallelDim d) const { return d == ParallelDim::kTp ? tp : d == ParallelDim::kDp ? dp : pp; }
  int product() const { return tp * dp * pp; }
};

// A rank's coordinates, indexed by ParallelDim.
struct GridCoord {
  int tp = 0, dp = 0, pp = 0;
  int& operator[](ParallelDim d) { return d == ParallelDim::kTp ? tp : d == ParallelDim::kDp ? dp : pp; }
  int operator[](ParallelDim d) const { return d == ParallelDim::kTp ? tp : d == ParallelDim::kDp ? dp : pp; }
  bool operator==(const GridCoord&) const = default;
};

class RankLayout {
 public:
  // order: e.g. "tp-dp-pp" (innermost first); shape.product() must equal world_size.
  RankLayout(const std::string& order, GridShape shape, int world_size);

  int world_size() const { return world_size_; }
  const GridShape& shape() const { return shape_; }
  int size(ParallelDim d) const { return shape_.size(d); }
  // All three dimensions, innermost first (named ones in order, then the omitted size-1 ones).
  const std::array<ParallelDim, 3>& order() const { return order_; }
  std::string order_string() const;  // the named dimensions, e.g. "tp-dp-pp"

  GridCoord coord(int world_rank) const;
  int world_rank(const GridCoord& c) const;
  // The d-group holding world_rank: world ranks indexed by group rank (= coordinate along d).
  std::vector<int> group(ParallelDim d, int world_rank) const;
  std::string group_name(ParallelDim d, int world_rank) const;
  // "tp=1,dp=0,pp=1": the rank's coordinates in tp, dp, pp order (the communicators' rank labels).
  std::string rank_label(int world_rank) const;
  // Every d-group, ordered by the world rank of its group rank 0.
  std::vector<std::vector<int>> all_groups(ParallelDim d) const;

 private:
  GridShape shape_;
  int world_size_ = 1;
  int named_ = 0;  // how many dimensions the order string names
  std::array<ParallelDim, 3> order_{};
  std::array<int, 3> stride_{};  // world-rank stride of each dimension, indexed by ParallelDim
};

class RankGrid {
 public:
  // Takes the world group (its size must be shape.product()) and creates this rank's groups:
  // tp, then dp, then pp, each through world.split (every rank at once: one ncclCommSplit on NCCL) with its RankLayout name.
  // memory_group: also a copy of the world ("memory"), the in-memory checkpoints' own stream
  // (ckpt/memory_checkpointer.h), so their replication never queues behind or ahead of training ops.
  RankGrid(std::unique_ptr<Communicator> world, const std::string& order, GridShape shape, bool memory_group = false);

  const RankLayout& layout() const { return layout_; }
  GridCoord coord() const { return layout_.coord(world_->rank()); }
  Communicator& world() { return *world_; }
  Communicator& tp() { return *groups_[0]; }
  Communicator& dp() { return *groups_[1]; }
  Communicator& pp() { return *groups_[2]; }
  Communicator& group(ParallelDim d) { return *groups_[static_cast<int>(d)]; }
  // Pipeline stages 0 and pp-1 of this rank's pp group, which hold the two copies of the tied token
  // embedding ("emb[tp=..,dp=..]", group rank 0 = first stage); nullptr on other stages or pp == 1.
  Communicator* embedding() { return embedding_.get(); }
  // Every rank of the world, on a group of its own (nullptr unless asked for at construction).
  Communicator* memory() { return memory_.get(); }

 private:
  std::unique_ptr<Communicator> world_;  // declared first: destroyed after the groups
  RankLayout layout_;
  std::array<std::unique_ptr<Communicator>, 3> groups_;  // indexed by ParallelDim
  std::unique_ptr<Communicator> embedding_;              // destroyed before the groups
  std::unique_ptr<Communicator> memory_;
};

}  // namespace ms
