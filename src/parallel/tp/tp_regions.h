// tp_regions: the tensor-parallel region boundaries of the model (model/tensor_regions.h) on a
// real TP group: Megatron's mappings plus MegaScale's chunked overlap (§3.2, Fig. 3).
//  - Sequence parallel (default): gather_rows is an all-gather of the ranks' row blocks, and
//    reduce_rows a reduce-scatter of the partial sums. Both are cut into `chunks` pieces along
//    each rank's rows: every chunk's collective is started at once (the group runs them in
//    order), and the caller's GEMM works on chunk k while chunk k+1 arrives (gather) or chunk k-1
//    is being reduced (reduce). Gathered chunks are copied into row order (the paper's "Copy
//    A0..AN"), partial chunks out of it. chunks = 1: one collective, no copy, no overlap (the
//    reference for measuring what overlap hides).
//  - Without sequence parallelism: gather_rows is an identity (every rank holds all rows) and
//    reduce_rows an all-reduce (started before the tail work, waited after it); chunks unused.
//  - The vocabulary-parallel softmax's max and sum: all-reduces.
// Activations travel in fp32 (bf16 GEMM inputs are converted after the gather, so the bits equal
// the single-process ones). Every wait is timed (exposed_seconds) and is a compute span in the
// trace. Buffers are allocated here once; a call allocates only inside the communicator.
#pragma once
#include <cstddef>
#include <vector>

#include "base/device_array.h"     // DeviceArray
#include "comm/communicator.h"     // Communicator, CommWork, StreamOrder
#include "kernels/backend.h"       // KernelBackend
#include "model/tensor_regions.h"  // TensorRegions

namespace ms {

class TpRegions final : public TensorRegions {
 public:
  // full_rows: the most rows (B*T) a region carries; width: the row width (C). k: the model's
  // kernels (copies and adds of rows run there, on its stream); on: its buffers' StreamOrder.
  TpRegions(Communicator& tp, int chunks, bool sequence_parallel, size_t full_rows, int width, KernelBackend& k,
            StreamOrder on);

  const float* gather_rows(const float* local, float* full, int rows_local, int width, Rows ready) override;
  void reduce_rows(float* partial, float* out_local, int rows_local, int width, bool accumulate, Rows produce,
                   Tail tail) override;
  void all_reduce_max(float* v, size_t n) override;
  void all_reduce_sum(float* v, size_t n) override;

  // Seconds the compute thread waited on this group since the last reset.
  double exposed_seconds() const { return exposed_s_; }
  void reset_exposed_seconds() { exposed_s_ = 0; }
  int chunks() const { return chunks_; }
  bool sequence_parallel() const { return sp_; }

 private:
  void wait(CommWork& w, const char* what);
  // Local rows of chunk k out of K: [k*n/K, (k+1)*n/K).
  static int chunk_lo(int k, int K, int n) { return static_cast<int>(static_cast<long long>(k) * n / K); }

  Communicator& comm_;
  int parts_, index_, chunks_;
  bool sp_;
  size_t full_rows_;
  int width_;
  KernelBackend& k_;
  StreamOrder on_;
  DeviceArray<float> stage_;    // (full_rows, width): chunked collectives' contiguous buffers
  DeviceArray<float> reduced_;  // (full_rows / parts, width): a reduce-scatter's result before it is added
  std::vector<CommWork> works_;
  double exposed_s_ = 0;
};

}  // namespace ms
