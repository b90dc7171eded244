// tensor_regions: the boundaries where the ranks of a tensor-parallel model exchange activations
// (Megatron's copy-to / reduce-from / gather-from / scatter-to regions). The model (gpt.h) runs on
// its local shapes and calls these at the region boundaries, in forward and backward alike; it
// never communicates itself. This base class is one rank: no communication, every call an
// identity. parallel/tp/tensor_parallel.h supplies the real one (sequence-parallel all-gather and
// reduce-scatter cut into chunks pipelined with the callbacks' GEMMs, or all-reduce without SP).
// Row ranges [lo, hi) are rows of the FULL buffer (B*T rows); a rank's own rows are the contiguous
// block rows_local * index ... when the implementation shards the sequence.
#pragma once
#include <cstddef>

#include "base/function_ref.h"  // FunctionRef

namespace ms {

class TensorRegions {
 public:
  using Rows = FunctionRef<void(int lo, int hi)>;
  using Tail = FunctionRef<void()>;
  virtual ~TensorRegions() = default;

  // Entering a tensor-parallel region: this rank's `local` rows (rows_local x width) become the
  // full input (every rank's rows, in order) and the returned pointer points at it: `full` when
  // rows are exchanged, `local` itself when they are not. ready(lo, hi) runs on the caller's
  // thread for row ranges of the result as they become available (every row exactly once; with
  // chunking, the next chunk travels while ready() computes on this one).
  virtual const float* gather_rows(const float* local, float* full, int rows_local, int width, Rows ready) {
    ready(0, rows_local);
    return local;
  }

  // Leaving it: produce(lo, hi) must write rows [lo, hi) of `partial` (full rows x width), this
  // rank's partial sum; then tail() runs (work that may overlap the last communication); then the
  // sum over ranks of this rank's rows is written to `out_local` (rows_local x width), or added to
  // it when accumulate. When partial == out_local (one rank) only produce and tail run.
  virtual void reduce_rows(float* partial, float* out_local, int rows_local, int width, bool accumulate, Rows produce,
                           Tail tail) {
    produce(0, rows_local);
    tail();
  }

  // Vocabulary-parallel softmax: element-wise max / sum of v (n) over the ranks, in place.
  virtual void all_reduce_max(float* v, size_t n) {}
  virtual void all_reduce_sum(float* v, size_t n) {}
};

}  // namespace ms
