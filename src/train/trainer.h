// trainer: one rank's training step.
// A step = zero grads, grad_accum micro-batches of forward+backward (the loss of each row scaled
// by 1/(all rows of the step), so accumulation equals one big batch), global-norm clipping, one
// optimizer update at the scheduled learning rate. A non-finite gradient norm stops the run with
// an error before the update, so non-finite weights are never produced or exported.
// The run around it (data, logging, validation, export, sampling) is wired by the application
// (apps/train_run.h); evaluation.h and sampling.h serve it.
#pragma once
#include <functional>  // std::function
#include <memory>
#include <string>

#include "config/config.h"        // Config
#include "model/gpt.h"           // GPT
#include "optim/lr_schedule.h"   // LrSchedule
#include "optim/optimizer.h"     // Optimizer

namespace ms {

class Communicator;
class TensorParallel;
class ZeroDataParallel;

struct StepStats {
  int step = 0;            // 1-based index of the step just taken
  float loss = 0;          // mean training loss over the step's micro-batches
  float grad_norm = 0;     // global L2 norm before clipping
  float lr = 0;
  double seconds = 0;      // wall time of the step
  double comm_exposed_seconds = 0;  // data parallel: time the step waited on its communication
  double tp_exposed_seconds = 0;    // tensor parallel: time the step waited on the TP group
};

class Trainer {
 public:
  // dp: the data-parallel group (nullptr or size 1: one process holds everything). With dp, the
  // optimizer is ZeRO-2 sharded (zero_dp.h); cfg.train.grad_accum is per rank.
  // tp: the tensor-parallel group (nullptr or size 1: the whole model); with it the model holds
  // this rank's part (parallel/tp/tensor_parallel.h), and ZeRO shards that part over dp.
  // Compute spans go to the trace sink (obs/trace_sink.h) when its compute track is on.
  explicit Trainer(const Config& cfg, Communicator* dp = nullptr, Communicator* tp = nullptr);
  ~Trainer();

  // One optimizer step; next_micro_batch(inputs, targets) fills B*T ids each, grad_accum times.
  StepStats train_step(const std::function<void(int*, int*)>& next_micro_batch);

  GPT& model() { return model_; }
  const Config& config() const { return cfg_; }
  int steps_taken() const;
  ZeroDataParallel* data_parallel() { return zero_.get(); }
  TensorParallel* tensor_parallel() { return tp_.get(); }
  // Parameters complete on this rank (waits for in-flight all-gathers). Before export or reading
  // model().params() directly.
  void sync_params();

 private:
  double grad_sq_sum_whole();  // the whole model's gradient sum of squares, identical on every rank

  Config cfg_;
  GPT model_;
  std::unique_ptr<TensorParallel> tp_;        // tensor parallel (model part + regions)
  std::unique_ptr<Optimizer> optimizer_;      // one process
  std::unique_ptr<ZeroDataParallel> zero_;    // data parallel (sharded optimizer)
  LrSchedule schedule_;
  int dp_size_ = 1;
  std::vector<ParamTensor> partial_views_;    // TP: gradient views summed over the group each step
  bool grads_zeroed_ = false;  // the last optimizer step left the gradient buffer zero
  std::vector<int> inputs_, targets_;
};

}  // namespace ms
