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

class DataLoader;
class Gpt2Tokenizer;

struct StepStats {
  int step = 0;            // 1-based index of the step just taken
  float loss = 0;          // mean training loss over the step's micro-batches
  float grad_norm = 0;     // global L2 norm before clipping
  float lr = 0;
  double seconds = 0;      // wall time of the step
};

class Trainer {
 public:
  explicit Trainer(const Config& cfg);

  // One optimizer step; next_micro_batch(inputs, targets) fills B*T ids each, grad_accum times.
  StepStats train_step(const std::function<void(int*, int*)>& next_micro_batch);
  // Mean loss over `batches` micro-batches from `val`, read from its beginning.
  float eval_loss(DataLoader& val, int batches);
  // Text generated from an end-of-text prompt (top-k 40 sampling, seeded).
  std::string sample(const Gpt2Tokenizer& tok, int ntokens, uint64_t seed);

  GPT& model() { return model_; }
  const Config& config() const { return cfg_; }
  int steps_taken() const { return optimizer_.steps_taken(); }

 private:
  Config cfg_;
  GPT model_;
  Optimizer optimizer_;
  LrSchedule schedule_;
  std::vector<int> inputs_, targets_;
};

// The full run described by cfg (already validated): prints progress, writes
// cfg.train.out_dir/{config.resolved.toml, log.jsonl, model/}, returns the final validation loss
// (or the last training loss without validation data).
float run_training(const Config& cfg);

}  // namespace ms
