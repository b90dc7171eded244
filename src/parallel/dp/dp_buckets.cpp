// dp_buckets.cpp: see dp_buckets.h.
#include "parallel/dp/dp_buckets.h"

#include <algorithm>

#include "base/check.h"

namespace ms {

DpBucketLayout::DpBucketLayout(size_t numel, int dp, int rank, size_t bucket_elems,
                               const std::vector<ParamTensor>& tensors)
    : numel_(numel), dp_(dp), rank_(rank), num_tensors_(tensors.size()) {
  MS_CHECK(dp >= 1 && rank >= 0 && rank < dp, "DpBucketLayout: rank {} of dp {}", rank, dp);
  MS_CHECK(numel > 0, "DpBucketLayout: empty buffer");
  const size_t d = static_cast<size_t>(dp);
  // Bucket size: a multiple of dp (and of 16 floats per shard, for aligned shards), at least one.
  const size_t unit = 16 * d;
  const size_t step = std::max<size_t>(unit, (bucket_elems + unit - 1) / unit * unit);
  size_t end = numel;
  while (end > 0) {
    DpBucket b;
    b.end = end;
    b.start = end > step ? end - step : 0;
    b.shard = (b.end - b.start + d - 1) / d;
    b.local = local_size_;
    local_size_ += b.shard;
    buckets_.push_back(b);
    end = b.start;
  }
  // Pieces: every tensor cut by the owned ranges, in local order.
  for (size_t bi = 0; bi < buckets_.size(); bi++) {
    const size_t lo = owned_lo(bi), hi = owned_hi(bi);
    for (size_t t = 0; t < tensors.size(); t++) {
      const size_t a = std::max(lo, tensors[t].offset), z = std::min(hi, tensors[t].offset + tensors[t].numel);
      if (a >= z) continue;
      DpPiece p;
      p.view = tensors[t];
      p.view.offset = buckets_[bi].local + (a - lo);
      p.view.numel = z - a;
      p.global = a;
      p.tensor = static_cast<int>(t);
      pieces_.push_back(p);
    }
  }
  std::sort(pieces_.begin(), pieces_.end(), [](const DpPiece& x, const DpPiece& y) { return x.view.offset < y.view.offset; });
}

size_t DpBucketLayout::owned_lo(size_t b) const {
  const DpBucket& k = buckets_.at(b);
  return std::min(k.end, k.start + static_cast<size_t>(rank_) * k.shard);
}

size_t DpBucketLayout::owned_hi(size_t b) const {
  const DpBucket& k = buckets_.at(b);
  return std::min(k.end, k.start + static_cast<size_t>(rank_ + 1) * k.shard);
}

}  // namespace ms
