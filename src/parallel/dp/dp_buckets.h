// dp_buckets: how ZeRO-2 data parallelism cuts the flat gradient/parameter buffer (pure layout, no
// communication). Buckets are contiguous ranges built from the END of the buffer, so they complete
// in backward order (ln_f, last block, ..., first block, embeddings: gpt.h grad_ready order); each
// holds about bucket_elems elements and, except the one that starts at offset 0, a multiple of dp.
// A bucket of n elements is padded to n' = ceil(n/dp)*dp and split into dp equal shards of n'/dp;
// rank r owns shard r: elements [start + r*shard, min(start + (r+1)*shard, end)). A rank keeps its
// shards of all buckets back to back in a compact buffer (local offsets), padding included, so
// reduce-scatter output and all-gather input are contiguous. Tensors that straddle shards are cut
// into pieces; each piece remembers its tensor so LAMB and clipping can sum norms per whole tensor.
#pragma once
#include <cstddef>
#include <vector>

#include "optim/param_tensor.h"  // ParamTensor

namespace ms {

struct DpBucket {
  size_t start = 0, end = 0;  // [start, end) in the flat buffer
  size_t shard = 0;           // elements per rank's shard (padded length / dp)
  size_t local = 0;           // where this bucket's shard sits in the rank's compact buffer
  size_t padded(int dp) const { return shard * static_cast<size_t>(dp); }
};

struct DpPiece {
  ParamTensor view;  // name/decay of its tensor; offset is LOCAL (compact buffer), numel = piece size
  size_t global = 0; // offset of the piece in the flat buffer
  int tensor = 0;    // index of its tensor in the model's list
};

class DpBucketLayout {
 public:
  // numel: the flat buffer; tensors: the model's (disjoint, covering what the optimizer updates).
  DpBucketLayout(size_t numel, int dp, int rank, size_t bucket_elems, const std::vector<ParamTensor>& tensors);

  int dp() const { return dp_; }
  int rank() const { return rank_; }
  size_t numel() const { return numel_; }
  // In backward (completion) order: buckets_[0] ends at numel.
  const std::vector<DpBucket>& buckets() const { return buckets_; }
  size_t local_size() const { return local_size_; }  // compact buffer of this rank, padding included
  // This rank's owned range of bucket b: [lo, hi) in the flat buffer (hi may equal lo).
  size_t owned_lo(size_t b) const;
  size_t owned_hi(size_t b) const;
  // The pieces of every tensor inside this rank's owned ranges, in local-offset order.
  const std::vector<DpPiece>& pieces() const { return pieces_; }
  size_t num_tensors() const { return num_tensors_; }

 private:
  size_t numel_;
  int dp_, rank_;
  std::vector<DpBucket> buckets_;
  size_t local_size_ = 0;
  std::vector<DpPiece> pieces_;
  size_t num_tensors_ = 0;
};

}  // namespace ms
