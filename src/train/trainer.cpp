// trainer.cpp: see trainer.h.
#include "train/trainer.h"

#include <cmath>  // std::isfinite, std::sqrt, std::nan

#include "base/check.h"                // MS_CHECK
#include "base/clock.h"                // Stopwatch
#include "obs/fault_injection.h"       // fault_nan_loss
#include "optim/grad_norm.h"           // clip_scale

namespace ms {

Trainer::Trainer(const Config& cfg, Communicator* dp, Communicator* tp, Communicator* pp, Communicator* embedding,
                 bool init_weights)
    : model_(std::make_unique<ParallelModel>(cfg, dp, tp, pp, embedding, init_weights)),
      schedule_{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps,
                cfg.optim.decay_steps > 0 ? cfg.optim.decay_steps : cfg.train.steps} {}

Trainer::~Trainer() = default;

StepStats Trainer::train_step(const MicroBatches& next_micro_batch) {
  const Stopwatch watch;
  const Config& cfg = model_->config();
  const int B = cfg.train.batch_size, T = cfg.train.seq_len, A = cfg.train.grad_accum;
  const int N = B * T, replicas = model_->data_parallel_size();
  // Every row counts equally in the step: dloss = 1 / (rows with a target in the whole step,
  // over all data-parallel ranks). Rows are never ignored by the loaders, so that is N * A * dp.
  const float dloss = 1.0f / (static_cast<float>(N) * A * replicas);
  const double loss_sum = model_->run_micro_batches(dloss, next_micro_batch);
  StepStats s;
  s.step = steps_taken() + 1;
  model_->finish_grad_reduce();
  // MEGASCALE_FAULT nan (obs/fault_injection.h): this rank's local loss of the step is NaN.
  const double local_loss = fault_nan_loss(s.step) ? std::nan("") : loss_sum;
  s.loss = static_cast<float>(model_->sum_loss(local_loss) / (static_cast<double>(A) * replicas));
  // A non-finite loss (known to its data-parallel and pipeline peers) poisons these ranks' gradients,
  // as its backward would: the norm's sums carry it to the tensor-parallel peers too, so every rank
  // stops at the check below (an injected NaN; a real one has made the gradients NaN already).
  if (!std::isfinite(s.loss)) model_->poison_grads();
  // Sequence parallelism: LayerNorm and position-embedding gradients are partial over the TP group.
  model_->all_reduce_partial_grads();
  const double norm = std::sqrt(model_->grad_sq_sum());
  s.grad_norm = static_cast<float>(norm);
  // Every rank sees the same loss and norm (rank-order sums), so all stop together.
  MS_CHECK(std::isfinite(norm) && std::isfinite(s.loss),
           "step {}: loss {} / gradient norm {} is not finite; stopping before the update (nothing is exported)",
           s.step, s.loss, norm);
  const float scale = clip_scale(norm, cfg.optim.grad_clip);
  s.lr = schedule_.at(s.step - 1);
  if (before_update_) before_update_();
  model_->update(s.lr, scale);
  const StepTimings t = model_->step_timings();
  s.comm_exposed_seconds = t.dp_exposed;
  s.tp_exposed_seconds = t.tp_exposed;
  s.pp_wait_seconds = t.pp_wait;
  s.compute_seconds = t.compute;
  s.seconds = watch.seconds();
  return s;
}

float Trainer::eval_loss(int batches, const MicroBatches& next_micro_batch) {
  MS_CHECK(batches >= 1, "evaluation over {} batches", batches);
  return static_cast<float>(model_->forward_only_loss_sum(batches, next_micro_batch) / batches);
}

}  // namespace ms
