// rank_grid: layout arithmetic and group creation (see rank_grid.h).
#include "comm/rank_grid.h"

namespace ms {

const char* parallel_dim_name(ParallelDim d) {
  return d == ParallelDim::kTp ? "tp" : d == ParallelDim::kDp ? "dp" : "pp";
}

namespace {

ParallelDim parse_dim(const std::string& s, const std::string& order) {
  for (ParallelDim d : {ParallelDim::kTp, ParallelDim::kDp, ParallelDim::kPp})
    if (s == parallel_dim_name(d)) return d;
  MS_FAIL("parallel order '{}': unknown dimension '{}' (use tp, dp, pp joined by '-')", order, s);
}

}  // namespace

RankLayout::RankLayout(const std::string& order, GridShape shape, int world_size)
    : shape_(shape), world_size_(world_size) {
  for (ParallelDim d : {ParallelDim::kTp, ParallelDim::kDp, ParallelDim::kPp})
    MS_CHECK(shape.size(d) >= 1, "parallel size {} = {} must be at least 1", parallel_dim_name(d), shape.size(d));
  std::array<bool, 3> seen{};
  size_t start = 0;
  for (;;) {
    const size_t dash = order.find('-', start);
    const std::string name = order.substr(start, dash == std::string::npos ? std::string::npos : dash - start);
    const ParallelDim d = parse_dim(name, order);
    MS_CHECK(!seen[static_cast<int>(d)], "parallel order '{}': dimension '{}' appears twice", order, name);
    seen[static_cast<int>(d)] = true;
    order_[named_++] = d;
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  int n = named_;
  for (ParallelDim d : {ParallelDim::kTp, ParallelDim::kDp, ParallelDim::kPp}) {
    if (seen[static_cast<int>(d)]) continue;
    MS_CHECK(shape.size(d) == 1, "parallel order '{}' leaves out '{}' but its size is {} (name it in the order)",
             order, parallel_dim_name(d), shape.size(d));
    order_[n++] = d;
  }
  MS_CHECK(shape.product() == world_size,
           "parallel sizes tp={} x dp={} x pp={} = {} do not match the world size {}", shape.tp, shape.dp, shape.pp,
           shape.product(), world_size);
  int stride = 1;
  for (ParallelDim d : order_) {
    stride_[static_cast<int>(d)] = stride;
    stride *= shape.size(d);
  }
}

std::string RankLayout::order_string() const {
  std::string s;
  for (int i = 0; i < named_; i++) {
    if (i) s += '-';
    s += parallel_dim_name(order_[i]);
  }
  return s;
}

GridCoord RankLayout::coord(int world_rank) const {
  MS_CHECK(world_rank >= 0 && world_rank < world_size_, "world rank {} outside 0..{}", world_rank, world_size_ - 1);
  GridCoord c;
  for (ParallelDim d : order_) c[d] = world_rank / stride_[static_cast<int>(d)] % shape_.size(d);
  return c;
}

int RankLayout::world_rank(const GridCoord& c) const {
  int w = 0;
  for (ParallelDim d : order_) {
    MS_CHECK(c[d] >= 0 && c[d] < shape_.size(d), "coordinate {}={} outside 0..{}", parallel_dim_name(d), c[d],
             shape_.size(d) - 1);
    w += c[d] * stride_[static_cast<int>(d)];
  }
  return w;
}

std::vector<int> RankLayout::group(ParallelDim d, int world_rank) const {
  GridCoord c = coord(world_rank);
  std::vector<int> members(shape_.size(d));
  for (int i = 0; i < shape_.size(d); i++) {
    c[d] = i;
    members[i] = this->world_rank(c);
  }
  return members;
}

std::string RankLayout::group_name(ParallelDim d, int world_rank) const {
  const GridCoord c = coord(world_rank);
  std::string s = std::string(parallel_dim_name(d)) + "[";
  bool first = true;
  for (ParallelDim o : order_) {
    if (o == d) continue;
    if (!first) s += ',';
    first = false;
    s += fmt::format("{}={}", parallel_dim_name(o), c[o]);
  }
  return s + "]";
}

std::string RankLayout::rank_label(int world_rank) const {
  const GridCoord c = coord(world_rank);
  return fmt::format("tp={},dp={},pp={}", c.tp, c.dp, c.pp);
}

std::vector<std::vector<int>> RankLayout::all_groups(ParallelDim d) const {
  std::vector<std::vector<int>> out;
  for (int w = 0; w < world_size_; w++)
    if (coord(w)[d] == 0) out.push_back(group(d, w));
  return out;
}

RankGrid::RankGrid(std::unique_ptr<Communicator> world, const std::string& order, GridShape shape, bool memory_group)
    : world_(std::move(world)), layout_(order, shape, world_ ? world_->size() : 0) {
  MS_CHECK(world_, "RankGrid needs a world communicator");
  auto labels = std::make_shared<std::vector<std::string>>();
  for (int w = 0; w < world_->size(); w++) labels->push_back(layout_.rank_label(w));
  world_->set_rank_labels(std::move(labels));
  for (ParallelDim d : {ParallelDim::kTp, ParallelDim::kDp, ParallelDim::kPp}) {
    const int me = world_->rank();
    groups_[static_cast<int>(d)] = world_->split(layout_.group(d, me), layout_.group_name(d, me));
  }
  // The tied embedding's two copies: pp ranks 0 and P-1 of each pipeline group (Megatron's
  // embedding group), a sub-group of the pp group created by its two members only.
  const int P = shape.pp, stage = coord().pp;
  if (P > 1 && (stage == 0 || stage == P - 1)) {
    std::string name = layout_.group_name(ParallelDim::kPp, world_->rank());
    name.replace(0, 2, "emb");
    embedding_ = pp().new_group({0, P - 1}, name);
  }
  if (memory_group) {
    std::vector<int> all(static_cast<size_t>(world_->size()));
    for (int w = 0; w < world_->size(); w++) all[static_cast<size_t>(w)] = w;
    memory_ = world_->new_group(all, "memory");
  }
}

}  // namespace ms
