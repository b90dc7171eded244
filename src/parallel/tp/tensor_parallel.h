// tensor_parallel: Megatron-style tensor (+ sequence) parallelism applied to a GPT from outside.
// The model was built on its part's local shapes (ModelShard, model/param_layout.h); this installs
// the TP group's region boundaries into it (tp_regions.h) and owns what the step needs beyond the
// model's own passes:
//  - gradients of replicated tensors that each rank computed from its own rows only (sequence
//    parallelism: LayerNorms and the position embedding; ParamSpec::grad_partial) are summed over
//    the group (all_reduce_partial_grads), after backward or after ZeRO's reduce-scatter (sums
//    commute, so either place gives the whole gradient); row-parallel biases need none: every rank
//    computes them from the gathered output gradient;
//  - norms see each tensor whole: sharded tensors' sums of squares are added over the group in
//    rank order, replicated ones are counted once (reduce_tensor_norms for LAMB, counted() for the
//    global norm used by clipping);
//  - the whole model for export (gather_full_params).
// Every rank of the group ends the step with bit-identical replicated tensors.
#pragma once
#include <memory>
#include <vector>

#include "comm/communicator.h"    // Communicator
#include "config/parallel_config.h"  // ParallelConfig
#include "model/gpt.h"            // GPT
#include "optim/param_tensor.h"   // ParamTensor
#include "parallel/rank_sum.h"    // RankOrderSum
#include "parallel/tp/tp_regions.h"

namespace ms {

class TensorParallel {
 public:
  // model: built with ModelShard{tp.size(), tp.rank(), parallel.sequence_parallel}; parallel:
  // sequence_parallel, tp_chunks; max_rows: B*T of the largest micro-batch (train.batch_size x seq_len).
  TensorParallel(GPT& model, Communicator& tp, const ParallelConfig& parallel, size_t max_rows);
  ~TensorParallel();

  Communicator& comm() { return comm_; }
  TpRegions& regions() { return *regions_; }

  // Per model tensor (param_specs() order): whether this rank counts it in a global sum over the
  // group (sharded tensors: every rank; replicated ones: rank 0 only).
  const std::vector<char>& counted() const { return counted_; }
  // Per model tensor: whether its gradient is a partial sum over the group (see above).
  const std::vector<char>& grad_partial() const { return partial_; }

  // Sums over the group the gradient elements of the given views (offsets into grads), which must
  // be views of grad_partial tensors, the same on every rank of the group.
  void all_reduce_partial_grads(float* grads, const std::vector<ParamTensor>& views);

  // Sum over the group of one value per rank, added in rank order (bit-identical everywhere).
  double sum_across_ranks(double v);
  // w_sq, r_sq: one entry per model tensor, this rank's whole-tensor sums of squares (after any
  // data-parallel reduction); sharded tensors become the sum over the group, replicated stay.
  void reduce_tensor_norms(double* w_sq, double* r_sq);

  // The model's parameters not split over the group (build_param_layout(cfg.model, the same layers)
  // order: the whole model unless a pipeline chunk), on every rank of the group.
  std::vector<float> gather_full_params();

  double exposed_seconds() const { return regions_->exposed_seconds() + exposed_s_; }
  void reset_exposed_seconds() { regions_->reset_exposed_seconds(); exposed_s_ = 0; }

 private:
  GPT& model_;
  Communicator& comm_;
  ModelConfig model_cfg_;
  std::unique_ptr<TpRegions> regions_;
  std::vector<char> counted_, partial_;
  RankOrderSum sums_;
  std::vector<double> norms_in_, norms_out_;
  DeviceArray<float> pack_;    // grad_partial elements packed for one all-reduce
  double exposed_s_ = 0;
};

}  // namespace ms
