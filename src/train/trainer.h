// trainer: the arithmetic of one rank's training step, over a ParallelModel (parallel/parallel_model.h)
// that owns the model chunks, their parallel wrappers and their training state.
// A step = grad_accum micro-batches of forward+backward (the loss of each row scaled by 1/(all rows
// of the step, over every data-parallel replica), so accumulation equals one big batch), the loss
// and the global gradient norm summed over every axis in rank order (the same on every rank),
// global-norm clipping, one optimizer update at the scheduled learning rate. A non-finite loss or
// gradient norm stops the run with an error before the update, so non-finite weights are never
// produced or exported. Nothing here branches on a parallel axis: with pp == 1 and no groups the
// ParallelModel is one chunk holding the whole model and the step is the single-process loop.
// The run around it (data, logging, validation, export, sampling) is wired by train/training_run.h (its phases);
// evaluation.h and sampling.h serve it.
#pragma once
#include <functional>  // std::function
#include <memory>
#include <string>

#include "config/config.h"            // Config
#include "model/gpt.h"               // GPT
#include "optim/lr_schedule.h"       // LrSchedule
#include "parallel/parallel_model.h" // ParallelModel

namespace ms {

class Communicator;

struct StepStats {
  int step = 0;            // 1-based index of the step just taken
  float loss = 0;          // mean training loss over the step's micro-batches
  float grad_norm = 0;     // global L2 norm before clipping
  float lr = 0;
  double seconds = 0;      // wall time of the step
  double comm_exposed_seconds = 0;  // data parallel: time the step waited on its communication
  double tp_exposed_seconds = 0;    // tensor parallel: time the step waited on the TP group
  double pp_wait_seconds = 0;       // pipeline: time the step waited on pipeline sends / receives
  double compute_seconds = 0;       // forward + backward computation of this rank's chunks
};

class Trainer {
 public:
  // dp, tp, pp, embedding, init_weights: the ParallelModel's (parallel_model.h). With dp the
  // optimizer is ZeRO-2 sharded; cfg.train.grad_accum micro-batches per step on every rank.
  explicit Trainer(const Config& cfg, Communicator* dp = nullptr, Communicator* tp = nullptr,
                   Communicator* pp = nullptr, Communicator* embedding = nullptr, bool init_weights = true);
  ~Trainer();

  // Micro-batch source: fills B*T ids each, in order. Called grad_accum times per step, only on
  // ranks whose stage uses tokens (parallel().needs_tokens()).
  using MicroBatches = ParallelModel::Tokens;
  // One optimizer step.
  StepStats train_step(const MicroBatches& next_micro_batch);
  // Mean loss (forward only) over `batches` micro-batches of next_micro_batch, the same on every
  // rank; every rank of the job calls it.
  float eval_loss(int batches, const MicroBatches& next_micro_batch);

  ParallelModel& parallel() { return *model_; }
  GPT& model() { return model_->chunk(0); }  // chunk 0: the whole model when pp == 1
  const Config& config() const { return model_->config(); }
  int steps_taken() const { return model_->steps_taken(); }
  // Runs right before every optimizer update, the only place the state changes (a checkpoint's
  // stage-1 copy, made beside the step's forward and backward, finishes there).
  void set_before_update(std::function<void()> fn) { before_update_ = std::move(fn); }

 private:
  std::unique_ptr<ParallelModel> model_;  // holds the config
  LrSchedule schedule_;
  std::function<void()> before_update_;
};

}  // namespace ms
