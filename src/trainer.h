// trainer: one process's training step and the whole single-process run.
// A step = zero grads, grad_accum micro-batches of forward+backward (the loss of each row scaled
// by 1/(all rows of the step), so accumulation equals one big batch), global-norm clipping, one
// optimizer update at the scheduled learning rate. A non-finite gradient norm stops the run with
// an error before the update, so non-finite weights are never produced or exported.
// run_training() wires data, model, optimizer, logging, validation, export and sampling together.
#pragma once
#include <functional>  // std::function
#include <memory>
#include <string>

#include "config.h"        // Config
#include "gpt.h"           // GPT
#include "lr_schedule.h"   // LrSchedule
#include "optimizer.h"     // Optimizer

namespace ms {

class Communicator;
class DataLoader;
class Gpt2Tokenizer;
class Timeline;
class ZeroDataParallel;

struct StepStats {
  int step = 0;            // 1-based index of the step just taken
  float loss = 0;          // mean training loss over the step's micro-batches
  float grad_norm = 0;     // global L2 norm before clipping
  float lr = 0;
  double seconds = 0;      // wall time of the step
  double comm_exposed_seconds = 0;  // data parallel: time the step waited on communication
};

class Trainer {
 public:
  // dp: the data-parallel group (nullptr or size 1: one process holds everything). With dp, the
  // optimizer is ZeRO-2 sharded (zero_dp.h); cfg.train.grad_accum is per rank.
  explicit Trainer(const Config& cfg, Communicator* dp = nullptr, Timeline* timeline = nullptr);
  ~Trainer();

  // One optimizer step; next_micro_batch(inputs, targets) fills B*T ids each, grad_accum times.
  StepStats train_step(const std::function<void(int*, int*)>& next_micro_batch);
  // Mean loss over `batches` micro-batches from `val`, read from its beginning.
  float eval_loss(DataLoader& val, int batches);
  // Text generated from an end-of-text prompt (top-k 40 sampling, seeded).
  std::string sample(const Gpt2Tokenizer& tok, int ntokens, uint64_t seed);

  GPT& model() { return model_; }
  const Config& config() const { return cfg_; }
  int steps_taken() const;
  ZeroDataParallel* data_parallel() { return zero_.get(); }
  // Parameters complete on this rank (waits for in-flight all-gathers). Before export or reading
  // model().params() directly.
  void sync_params();

 private:
  Config cfg_;
  GPT model_;
  std::unique_ptr<Optimizer> optimizer_;      // one process
  std::unique_ptr<ZeroDataParallel> zero_;    // data parallel (sharded optimizer)
  LrSchedule schedule_;
  int dp_size_ = 1;
  Timeline* timeline_ = nullptr;
  bool grads_zeroed_ = false;  // the last optimizer step left the gradient buffer zero
  std::vector<int> inputs_, targets_;
};

// The full run described by cfg (already validated): prints progress, writes
// cfg.train.out_dir/{config.resolved.toml, log.jsonl, model/}, returns the final validation loss
// (or the last training loss without validation data).
// Under a launcher (megascale launch, mpirun, srun), every rank calls it: the world is set up from
// the environment (comm.h), the layout checked against it, rank 0 writes the run directory.
float run_training(const Config& cfg);

}  // namespace ms
