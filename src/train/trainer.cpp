// trainer.cpp: see trainer.h.
#include "train/trainer.h"

#include <cmath>  // std::isfinite, std::sqrt

#include "base/check.h"                // MS_CHECK
#include "base/clock.h"                // Stopwatch
#include "comm/communicator.h"        // Communicator
#include "obs/trace_sink.h"            // TraceScope
#include "optim/decay_policy.h"        // optimizer_tensors
#include "optim/grad_norm.h"           // grad_sq_sum, clip_scale
#include "parallel/dp/zero_dp.h"       // ZeroDataParallel
#include "parallel/tp/tensor_parallel.h"  // TensorParallel

namespace ms {

namespace {
ModelShard shard_of(const Config& cfg, const Communicator* tp) {
  if (!tp || tp->size() == 1) return {};
  return ModelShard{tp->size(), tp->rank(), cfg.parallel.sequence_parallel};
}
}  // namespace

Trainer::Trainer(const Config& cfg, Communicator* dp, Communicator* tp)
    : cfg_(cfg),
      model_(cfg.model, cfg.train.batch_size, cfg.train.seq_len, cfg.train.precision, shard_of(cfg, tp)),
      schedule_{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps,
                cfg.optim.decay_steps > 0 ? cfg.optim.decay_steps : cfg.train.steps} {
  model_.init_weights(static_cast<uint64_t>(cfg.train.seed));
  if (tp && tp->size() > 1) tp_ = std::make_unique<TensorParallel>(model_, *tp, cfg);
  const bool lamb = cfg.optim.name == OptimizerKind::kLamb;
  if (dp && dp->size() > 1) {
    dp_size_ = dp->size();
    zero_ = std::make_unique<ZeroDataParallel>(model_, *dp, cfg);
    if (tp_) {
      partial_views_ = zero_->shard_views(tp_->grad_partial());
      if (lamb) zero_->set_tensor_norm_reduce([this](double* w, double* r) { tp_->reduce_tensor_norms(w, r); });
    }
  } else {
    optimizer_ = std::make_unique<Optimizer>(
        cfg.optim, optimizer_tensors(model_.param_specs(), cfg.optim),
        model_.num_params());
    if (tp_) {
      partial_views_ = tp_->partial_views();
      // The views are whole local tensors: only the TP sum of sharded tensors is missing.
      if (lamb) optimizer_->set_norm_reduce([this](double* w, double* r) { tp_->reduce_tensor_norms(w, r); });
    }
  }
  const size_t N = static_cast<size_t>(cfg.train.batch_size) * cfg.train.seq_len;
  inputs_.resize(N);
  targets_.resize(N);
}

Trainer::~Trainer() = default;

int Trainer::steps_taken() const { return zero_ ? zero_->steps_taken() : optimizer_->steps_taken(); }

void Trainer::sync_params() {
  if (zero_) zero_->finish_param_all_gather();
}

double Trainer::grad_sq_sum_whole() {
  if (!tp_) return zero_ ? zero_->grad_sq_sum() : grad_sq_sum(model_.grads(), model_.num_params());
  // Tensor parallel: this rank's tensors counted once over the group (sharded: every rank's
  // slice; replicated: rank 0's copy), then summed over the group in rank order.
  const std::vector<char>& counted = tp_->counted();
  double mine = 0;
  if (zero_) {
    mine = zero_->grad_sq_sum(&counted);
  } else {
    const auto& specs = model_.param_specs();
    for (size_t i = 0; i < specs.size(); i++)
      if (counted[i]) mine += grad_sq_sum(model_.grads() + specs[i].offset, specs[i].numel());
  }
  return tp_->sum_across_ranks(mine);
}

StepStats Trainer::train_step(const std::function<void(int*, int*)>& next_micro_batch) {
  const Stopwatch watch;
  const int B = cfg_.train.batch_size, T = cfg_.train.seq_len, A = cfg_.train.grad_accum;
  const int N = B * T;
  if (zero_) zero_->reset_exposed_seconds();
  if (tp_) tp_->reset_exposed_seconds();
  if (!grads_zeroed_) model_.zero_grad();  // the single-process optimizer clears them in its pass
  grads_zeroed_ = false;
  double loss_sum = 0;
  for (int a = 0; a < A; a++) {
    {
      TraceScope span("data");
      next_micro_batch(inputs_.data(), targets_.data());
    }
    // Every row counts equally in the step: dloss = 1 / (rows with a target in the whole step,
    // over all data-parallel ranks). Rows are never ignored by the loaders, so that is N * A * dp.
    const float dloss = 1.0f / (static_cast<float>(N) * A * dp_size_);
    {
      TraceScope span("forward");
      loss_sum += model_.forward(inputs_.data(), targets_.data(), B, T, dloss);
    }
    if (zero_) zero_->arm_backward(a == A - 1);
    TraceScope span("backward");
    model_.backward();
  }
  StepStats s;
  s.step = steps_taken() + 1;
  if (zero_) {
    zero_->finish_grad_reduce_scatter();
    s.loss = static_cast<float>(zero_->sum_across_ranks(loss_sum) / (static_cast<double>(A) * dp_size_));
  } else {
    s.loss = static_cast<float>(loss_sum / A);
  }
  // Sequence parallelism: LayerNorm and position-embedding gradients are partial over the TP group.
  if (tp_) tp_->all_reduce_partial_grads(zero_ ? zero_->shard_grads() : model_.grads(), partial_views_);
  const double norm = std::sqrt(grad_sq_sum_whole());
  s.grad_norm = static_cast<float>(norm);
  // Every rank sees the same loss and norm (rank-order sums), so all stop together.
  MS_CHECK(std::isfinite(norm) && std::isfinite(s.loss),
           "step {}: loss {} / gradient norm {} is not finite; stopping before the update (nothing is exported)",
           s.step, s.loss, norm);
  float scale = clip_scale(norm, cfg_.optim.grad_clip);
  s.lr = schedule_.at(s.step - 1);
  if (zero_) {
    zero_->optimizer_step(s.lr, scale);
    zero_->start_param_all_gather();  // overlaps the next step's data loading and forward
    s.comm_exposed_seconds = zero_->exposed_seconds();
  } else {
    TraceScope span("optimizer");
    // Non-const params() marks the bf16 weight copy stale: the next forward converts it once,
    // unless the optimizer wrote it in its own pass (AdamW fuses the clipping scale and the copy).
    float* params = model_.params();
    if (optimizer_->step(params, model_.grads(), s.lr, scale, model_.bf16_weight_copy(),
                         /*zero_grads=*/true))
      model_.mark_bf16_weights_fresh();
    grads_zeroed_ = true;
  }
  if (tp_) s.tp_exposed_seconds = tp_->exposed_seconds();
  s.seconds = watch.seconds();
  return s;
}

}  // namespace ms
