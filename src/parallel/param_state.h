// param_state: who owns one model chunk's training state on this rank — its fp32 master weights,
// its gradients and its optimizer moments — and what a step does with them. Two owners implement it:
//  - LocalParamState (local_param_state.h): one rank holds everything (no data parallelism);
//  - ZeroDataParallel (dp/zero_dp.h): ZeRO-2, the gradient reduce-scattered over the data-parallel
//    group during backward, the optimizer and its state on this rank's shard, the weights
//    all-gathered after the update.
// The step is the same sequence for both (ParallelModel drives it, train/trainer.h does its
// arithmetic): begin_step, arm_grad_reduce before each micro-batch's backward, finish_grad_reduce,
// owned_grads() complete (grad_sq_sum for the global norm), update(lr, clipping scale), and
// finish_param_gather before anyone else reads the model's weights (export, checkpoints of others).
// Checkpoints see the state as StateRuns (contiguous runs of one tensor) and load it back from
// whole buffers of the chunk's layout. Guarantees: the chunk's model weights equal the master
// weights after finish_param_gather; every sum over ranks is added in rank order, so every rank of
// the group takes identical decisions.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "base/device.h"          // Device
#include "model/param_layout.h"   // ParamSpec
#include "optim/param_tensor.h"   // ParamTensor

namespace ms {

// Checkpoints: one contiguous run of one tensor's training state held by this rank.
struct StateRun {
  int chunk = 0;
  const ParamSpec* spec = nullptr;  // the chunk's tensor: this part's shape, its split, the whole shape
  bool head_copy = false;           // the last pipeline stage's copy of the tied token embedding
  size_t lo = 0, hi = 0;            // elements [lo, hi) of this rank's part of the tensor
  const float* param = nullptr;     // fp32 master weights, hi - lo elements
  const float* m = nullptr;         // optimizer first moment
  const float* v = nullptr;         // optimizer second moment
  // Where param / m / v live: kCuda is GPU memory, valid until the next optimizer update (the
  // checkpointer copies it on a stream of its own, after the update's kernels).
  Device device = Device::kCpu;
};

class ParamState {
 public:
  virtual ~ParamState() = default;

  // --- the step ---
  // Start of a step: communication timers reset, the chunk's gradient buffer zero.
  virtual void begin_step() = 0;
  // Before the backward of each micro-batch: whether it is the step's last (the gradient reduction
  // over replicas runs only during that one).
  virtual void arm_grad_reduce(bool last_micro_batch) = 0;
  // After the step's last backward: owned_grads() holds the gradient summed over every replica.
  virtual void finish_grad_reduce() = 0;
  // Gradients of [0, hi) that must first be summed with another group's copy (the tied token
  // embedding of the first and last pipeline stages): finish_grad_reduce calls combine(the chunk's
  // gradient buffer) before they are reduced or used.
  virtual void set_grad_combine(size_t hi, std::function<void(float* grads)> combine) = 0;
  // LAMB: one entry per chunk tensor, w then r sums of squares after the replica sum, to reduce
  // further (tensor parallelism: sharded tensors over the TP group).
  using TensorNormReduce = std::function<void(double* w_sq, double* r_sq)>;
  virtual void set_tensor_norm_reduce(TensorNormReduce fn) = 0;
  // The gradient this rank updates (its shard, or the whole chunk), valid after finish_grad_reduce.
  virtual float* owned_grads() = 0;
  virtual size_t owned_size() const = 0;
  // The views, offsets into owned_grads(), of this rank's elements of the tensors flagged in
  // `which` (one flag per chunk tensor).
  virtual std::vector<ParamTensor> owned_views(const std::vector<char>& which) const = 0;
  // Sum of squares of the whole reduced gradient (every replica's shard); with `counted` (one flag
  // per chunk tensor), of the flagged tensors only. Identical on every replica.
  virtual double grad_sq_sum(const std::vector<char>* counted) = 0;
  // Sum of one value per replica, added in rank order (identity for a single rank).
  virtual double sum_over_replicas(double v) = 0;
  // The gradient scaled by grad_scale (clipping), one optimizer update at lr; the new weights
  // reach the model (ZeRO: the all-gather starts here and overlaps what follows).
  virtual void update(float lr, float grad_scale) = 0;
  // The model's weights complete (waits for an in-flight all-gather).
  virtual void finish_param_gather() = 0;
  // Seconds this step waited on the replicas' communication.
  virtual double exposed_seconds() const = 0;

  // --- state ---
  virtual int steps_taken() const = 0;
  virtual int replicas() const = 0;
  // The state a fresh start has: master weights taken from the model's, moments zero, no step.
  virtual void reset_from_model() = 0;
  // Restore: whole buffers of the chunk's layout (every tensor filled) and the steps taken; the
  // model's weights are written too.
  virtual void load_state(const float* params, const float* m, const float* v, int steps_taken) = 0;
  // Restore from this rank's own runs (append_state_runs with every tensor flagged, no head copy),
  // packed run after run as hi - lo weights, then moment 1, then moment 2 (host memory); returns the
  // floats read. Under ZeRO the weights then complete over data parallelism (a collective), unless
  // `gather` is false: the caller then writes every other replica's weights with
  // load_replica_weights before the next step (no collective; every replica of the group must make
  // the same choice).
  virtual size_t load_own_runs(const float* packed, int steps_taken, bool gather) = 0;
  // Data-parallel replica `replica`'s weights from its own packed runs (its load_own_runs layout,
  // `available` floats at packed): into the model's weights, where the all-gather would have put
  // them. Returns the floats its runs take. Only under ZeRO.
  virtual size_t load_replica_weights(int replica, const float* packed, size_t available) = 0;
  // Checkpoints: this rank's runs of the tensors flagged in `owned` (one flag per chunk tensor);
  // `head_copy_tensor`: index of the tensor that is the head's copy of the tied embedding (-1: none).
  // Valid at a step boundary, until the next update.
  virtual void append_state_runs(int chunk, const std::vector<char>& owned, int head_copy_tensor,
                                 std::vector<StateRun>& out) = 0;
  // One line for the log: how the state is held (empty for a single rank).
  virtual std::string describe() const = 0;
};

}  // namespace ms
