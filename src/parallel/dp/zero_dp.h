// zero_dp: data parallelism with ZeRO-2 over a model that knows nothing of it (it only offers the
// grad_ready / param_wait hooks of gpt.h). Per step:
//  - backward of the last micro-batch: each gradient bucket (dp_buckets.h, backward order) starts
//    its reduce-scatter on the DP group's communication thread as soon as its last gradient is written
//    (start_grad_reduce_scatter), while backward goes on; finish_grad_reduce_scatter waits for the rest;
//  - the tied token embedding (a chunk with both the embedding and the LM head; its gradient is
//    otherwise complete only at the very end of backward): the model is asked to split it
//    (GPT::defer_token_grad), so the buckets wholly inside it start their reduce-scatter FIRST, as
//    soon as the LM head's backward has written its dense part; the embedding lookup's part, one row
//    per token, is all-gathered over the DP group after backward (start_token_rows_all_gather, N x C
//    floats and N ids per rank, against Vp x C for the whole embedding) and each rank adds the rows
//    of its shard, ranks in order, rows in order (finish_token_rows_all_gather). With one rank this is the model's own sum,
//    bit for bit; with more, each element's sum is regrouped (head parts, then rows): within the
//    layout-equivalence tolerances. Same arithmetic with overlap on or off;
//  - clipping and the optimizer (AdamW, or LAMB with per-tensor norms summed over the whole tensor
//    across ranks) run on this rank's shard only; optimizer state exists only for the shard;
//  - start_param_all_gather queues every bucket's all-gather in forward order right after the
//    update, so the first buckets arrive while the next step loads its data; the next forward waits
//    bucket by bucket (param_wait hook) just before it reads them.
// Cross-rank scalar sums (gradient norm, LAMB norms, loss) exchange doubles bit-exactly (all-gather)
// and add them in rank order, so every rank takes identical decisions.
// With overlap off, reduce-scatters start after backward and all-gathers finish before the step
// returns (for measuring what overlap hides). exposed_seconds() is the time the compute thread spent
// waiting on communication. It is the data-parallel ParamState (param_state.h): ParallelModel
// drives it through that interface; the named collective phases below stay callable directly.
// On a GPU (the model's device): the shards, the optimizer state and the staging buffers live in
// device memory; every collective is stream-ordered on the model's compute stream (a bucket's
// reduce-scatter starts after the kernels that wrote its gradients, never on the host's return
// from them; the next forward's kernels wait on each bucket's all-gather); the tied embedding is
// not split (its bucket is reduced at the end of backward); the state runs point into GPU memory
// (StateRun::device). Ordering test hook: MEGASCALE_TEST_DELAY_BACKWARD_MS=<ms> holds
// the compute stream that long before each reducing backward (KernelBackend::delay), so gradients
// are written well after the host has asked for their reduce-scatter; results must not change.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "base/aligned.h"     // AlignedBuffer
#include "base/device_array.h"  // DeviceArray
#include "comm/communicator.h"        // Communicator, CommWork
#include "config/optim_config.h"     // OptimConfig
#include "config/parallel_config.h"  // ParallelConfig
#include "optim/optimizer.h"  // Optimizer
#include "parallel/dp/dp_buckets.h"  // DpBucketLayout
#include "parallel/param_state.h"    // ParamState
#include "parallel/rank_sum.h"        // RankOrderSum
#include "model/gpt.h"         // GPT

namespace ms {

class ZeroDataParallel final : public ParamState {
 public:
  // Installs the model's hooks; copies this rank's shard of the (identical on every rank) weights.
  // Waits and the optimizer are compute spans in the trace sink (obs/trace_sink.h).
  // parallel: bucket_mb, overlap; optim: the optimizer of the shard.
  ZeroDataParallel(GPT& model, Communicator& dp, const ParallelConfig& parallel, const OptimConfig& optim);
  ~ZeroDataParallel() override;

  // Before the backward of micro-batch a of A: only the last one's gradients are reduced.
  // Asks the model to split the tied embedding's gradient on the last one (see above).
  void arm_backward(bool last_micro_batch);
  void finish_grad_reduce_scatter();
  // Gradients of [0, hi) that must first be combined with another group's (pipeline parallelism:
  // the tied token embedding's copy on the first / last stage, summed over the embedding group):
  // the buckets reaching below hi — the last ones in backward order, asserted — are not started
  // during backward; finish_grad_reduce_scatter calls combine(model gradients) and then starts them.
  void set_deferred_prefix(size_t hi, std::function<void(float* grads)> combine);
  // Sum of squares of the whole reduced gradient (all ranks' shards); with `counted` (one flag per
  // model tensor), only of the tensors flagged.
  double grad_sq_sum(const std::vector<char>* counted = nullptr) override;
  // LAMB: called with whole-tensor sums of squares (one entry per model tensor, w then r) after
  // the data-parallel sum, to reduce them further (tensor parallelism: shards over the TP group).
  void set_tensor_norm_reduce(TensorNormReduce fn) override { tensor_norm_reduce_ = std::move(fn); }
  // This rank's reduced gradient shard (valid after finish_grad_reduce_scatter) and the views of
  // its pieces of the tensors flagged in `which` (one flag per model tensor), offsets into it.
  float* shard_grads() { return shard_grads_.data(); }
  std::vector<ParamTensor> shard_views(const std::vector<char>& which) const;
  // Scales the shard's gradient (clipping), then one optimizer update of the shard at lr.
  void optimizer_step(float lr, float grad_scale);
  void start_param_all_gather();
  void finish_param_all_gather();  // all buckets (before export, evaluation by others, exit)

  // Sum of one value per rank, added in rank order (bit-identical on every rank).
  double sum_across_ranks(double v);
  int steps_taken() const override { return optimizer_.steps_taken(); }
  // Checkpoints. This rank's state lives in its pieces (layout().pieces()): the master weights at
  // shard_params() + view.offset, the moments at optimizer().moment1/2() + view.offset.
  float* shard_params() { return shard_params_.data(); }
  Optimizer& optimizer() { return optimizer_; }
  // Restore: takes this rank's pieces of whole-buffer params / moments (the model's layout) and the
  // step counter, and writes the model's whole parameters (`params` may be the model's own).
  void load_state(const float* params, const float* m, const float* v, int steps_taken) override;
  size_t load_own_runs(const float* packed, int steps_taken, bool gather) override;
  size_t load_replica_weights(int replica, const float* packed, size_t available) override;
  // The flat-buffer ranges [lo, hi) DP rank `rank` of `dp` owns (its optimizer state), for a model
  // built like `model` (a restore's reader sends each rank only its ranges).
  static std::vector<std::pair<size_t, size_t>> owned_ranges(const GPT& model, const ParallelConfig& parallel,
                                                             const OptimConfig& optim, int dp, int rank);
  double exposed_seconds() const override { return exposed_s_; }
  void reset_exposed_seconds() { exposed_s_ = 0; }
  const DpBucketLayout& layout() const { return layout_; }
  size_t state_bytes() const;  // optimizer state + shard buffers held by this rank

  // ParamState (param_state.h), over the phases above.
  void begin_step() override;
  void arm_grad_reduce(bool last_micro_batch) override { arm_backward(last_micro_batch); }
  void finish_grad_reduce() override { finish_grad_reduce_scatter(); }
  void set_grad_combine(size_t hi, std::function<void(float* grads)> combine) override {
    set_deferred_prefix(hi, std::move(combine));
  }
  float* owned_grads() override { return shard_grads(); }
  size_t owned_size() const override { return layout_.local_size(); }
  std::vector<ParamTensor> owned_views(const std::vector<char>& which) const override { return shard_views(which); }
  double sum_over_replicas(double v) override { return sum_across_ranks(v); }
  void update(float lr, float grad_scale) override;
  void finish_param_gather() override { finish_param_all_gather(); }
  int replicas() const override { return comm_.size(); }
  void reset_from_model() override;
  void append_state_runs(int chunk, const std::vector<char>& owned, int head_copy_tensor,
                         std::vector<StateRun>& out) override;
  std::string describe() const override;

 private:
  void start_grad_reduce_scatter(size_t b);
  void start_tied_head_reduce_scatters();  // the buckets wholly inside the token embedding
  void start_token_rows_all_gather();      // the lookup's rows (and ids) of every DP rank
  void finish_token_rows_all_gather();     // ... added into this rank's shard
  void finish_param_all_gather(size_t b);
  void on_grad_ready(size_t lo, size_t hi);
  void on_param_wait(size_t lo, size_t hi);
  bool staged(size_t b) const;  // padded bucket that would read/write past the buffer
  void reduce_lamb_norms(double* w_sq, double* r_sq);          // pieces -> whole tensors

  GPT& model_;
  Communicator& comm_;
  bool overlap_;
  float bucket_mb_;
  DpBucketLayout layout_;
  std::vector<ParamTensor> optim_tensors_;  // the layout's tensors (another replica's layout: the same)
  size_t bucket_elems_;                     // the layout's bucket size
  Optimizer optimizer_;  // over this rank's pieces (local offsets), optimizer state for the shard only
  StreamOrder on_;  // the model's device and compute stream (timed_wait.h)
  DeviceArray<float> shard_params_, shard_grads_;  // on the model's device
  DeviceArray<float> rs_staging_, ag_staging_;  // the padded bucket's reduce-scatter input / all-gather output
  double delay_backward_ms_ = 0;                       // MEGASCALE_TEST_DELAY_BACKWARD_MS
  size_t last_ready_lo_ = 0;                       // grad_ready order check
  std::vector<CommWork> rs_, ag_;
  std::vector<char> ag_pending_;
  size_t next_rs_ = 0;
  bool armed_ = false;
  double exposed_s_ = 0;
  std::vector<double> sums_in_, sums_out_;  // LAMB norms per tensor (w then r)
  RankOrderSum rank_sum_;
  TensorNormReduce tensor_norm_reduce_;
  size_t deferred_hi_ = 0;                    // buckets with start < deferred_hi_ wait for combine_
  std::function<void(float*)> combine_;
  bool deferred(size_t b) const { return layout_.buckets()[b].start < deferred_hi_; }
  // The tied embedding split (see above): possible for this chunk, and asked of this backward.
  bool split_tied_ = false, split_armed_ = false, tied_started_ = false;
  size_t tied_hi_ = 0;         // end of the token embedding [0, tied_hi_) in the flat buffer
  size_t tied_first_ = 0;      // first bucket wholly inside it (buckets tied_first_.. are)
  struct OwnedRun { size_t lo, hi, local; };  // owned [lo, hi) of the embedding at shard offset local
  std::vector<OwnedRun> tied_owned_;
  AlignedBuffer<float> rows_send_, rows_recv_;  // per rank: N rows of C, then N ids (as floats)
  CommWork rows_ag_;
};

}  // namespace ms
