// trainer.cpp: see trainer.h.
#include "train/trainer.h"

#include <algorithm>  // std::fill_n
#include <cmath>  // std::isfinite, std::sqrt, std::nan
#include <cstring>  // std::memcpy

#include "base/check.h"                // MS_CHECK
#include "base/clock.h"                // Stopwatch
#include "comm/communicator.h"        // Communicator
#include "obs/fault_injection.h"       // fault_nan_loss
#include "obs/trace_sink.h"            // TraceScope
#include "optim/decay_policy.h"        // optimizer_tensors
#include "optim/grad_norm.h"           // grad_sq_sum, clip_scale
#include "parallel/dp/zero_dp.h"       // ZeroDataParallel
#include "parallel/pp/pipeline_stage.h"  // PipelineStage
#include "parallel/rank_sum.h"         // RankOrderSum
#include "parallel/timed_wait.h"       // wait_timed
#include "parallel/tp/tensor_parallel.h"  // TensorParallel

namespace ms {

namespace {
int size_of(const Communicator* c) { return c ? c->size() : 1; }

// The layers [begin, end) of global chunk g of G, as this rank's tensor-parallel part.
ModelShard chunk_shard(const Config& cfg, const Communicator* tp, int g, int G) {
  ModelShard s;
  if (size_of(tp) > 1) s = ModelShard{tp->size(), tp->rank(), cfg.parallel.sequence_parallel};
  const int per = cfg.model.n_layer / G;
  s.layer_begin = g * per;
  s.layer_end = (g + 1) * per;
  return s;
}

ScheduleSpec schedule_spec(const Config& cfg, int P) {
  ScheduleSpec spec;
  spec.kind = cfg.parallel.schedule;
  spec.stages = P;
  spec.virtual_stages = cfg.parallel.virtual_stages;
  spec.micro_batches = cfg.train.grad_accum;
  return spec;
}
}  // namespace

Trainer::Trainer(const Config& cfg, Communicator* dp, Communicator* tp, Communicator* pp, Communicator* embedding,
                 bool init_weights)
    : cfg_(cfg), pp_(size_of(pp) > 1 ? pp : nullptr), embedding_(embedding), tp_comm_(tp),
      stage_(pp_ ? pp_->rank() : 0),
      schedule_{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps,
                cfg.optim.decay_steps > 0 ? cfg.optim.decay_steps : cfg.train.steps} {
  const int P = size_of(pp_), v = pp_ ? cfg.parallel.virtual_stages : 1, G = P * v;
  const ScheduleSpec spec = schedule_spec(cfg, P);
  validate_schedule(spec, cfg.model.n_layer);
  const PipelineSchedule sch = build_schedule(spec);
  const std::vector<int> slots = activation_slots_needed(sch, stage_);
  const bool lamb = cfg.optim.name == OptimizerKind::kLamb;
  dp_size_ = size_of(dp);
  chunks_.resize(v);
  std::vector<GPT*> models;
  for (int c = 0; c < v; c++) {
    Chunk& k = chunks_[c];
    const int g = c * P + stage_;
    k.model = std::make_unique<GPT>(cfg.model, cfg.train.batch_size, cfg.train.seq_len, cfg.train.precision,
                                    chunk_shard(cfg, tp, g, G), slots[c]);
    GPT& m = *k.model;
    models.push_back(&m);
    if (init_weights) m.init_weights(static_cast<uint64_t>(cfg.train.seed));
    if (size_of(tp) > 1) {
      k.tp = std::make_unique<TensorParallel>(m, *tp, cfg);
      k.counted = k.tp->counted();
    }
    // The tied token embedding's two copies (first and last stage): Megatron's embedding group
    // starts them equal (broadcast from the first stage) and sums their gradients every step.
    if (pp_ && (m.has_embedding() || m.has_head())) {
      MS_CHECK(embedding_ && embedding_->size() == 2, "pipeline: stage {} holds a copy of the tied embedding but has "
               "no embedding group", stage_);
      const ParamSpec& wte = m.spec("transformer.wte.weight");
      MS_CHECK(wte.offset == 0, "pipeline: the tied embedding must start the chunk's parameters");
      k.tied = wte.numel();
      if (init_weights) embedding_->broadcast(m.params(), k.tied, DType::kF32, 0);
      if (!m.has_embedding()) {  // the head's copy: the norm counts the embedding stage's copy only
        if (k.counted.empty()) k.counted.assign(m.param_specs().size(), 1);
        k.counted[0] = 0;
      }
    }
    if (dp_size_ > 1) {
      k.zero = std::make_unique<ZeroDataParallel>(m, *dp, cfg);
      if (k.tp) {
        k.partial_views = k.zero->shard_views(k.tp->grad_partial());
        if (lamb) k.zero->set_tensor_norm_reduce([t = k.tp.get()](double* w, double* r) { t->reduce_tensor_norms(w, r); });
      }
      if (k.tied) k.zero->set_deferred_prefix(k.tied, [this, n = k.tied](float* g) { sum_tied_grads(g, n); });
    } else {
      k.optimizer = std::make_unique<Optimizer>(cfg.optim, optimizer_tensors(m.param_specs(), cfg.optim), m.num_params());
      if (k.tp) {
        k.partial_views = k.tp->partial_views();
        // The views are whole local tensors: only the TP sum of sharded tensors is missing.
        if (lamb) k.optimizer->set_norm_reduce([t = k.tp.get()](double* w, double* r) { t->reduce_tensor_norms(w, r); });
      }
    }
  }
  stage_exec_ = std::make_unique<PipelineStage>(models, pp_, sch, cfg.train.batch_size, cfg.train.seq_len,
                                                cfg.parallel.pp_decoupled);
  if (pp_) pp_sum_ = std::make_unique<RankOrderSum>(*pp_, 1);
}

Trainer::~Trainer() = default;

void Trainer::init_weights_now() {
  for (Chunk& k : chunks_) {
    GPT& m = *k.model;
    m.init_weights(static_cast<uint64_t>(cfg_.train.seed));
    if (k.tied) embedding_->broadcast(m.params(), k.tied, DType::kF32, 0);
    if (k.zero) {  // the shards of the weights, zero moments, no step taken: the constructor's state
      const std::vector<float> zeros(m.num_params(), 0.0f);
      k.zero->load_state(m.params(), zeros.data(), zeros.data(), 0);
    }
  }
}

int Trainer::steps_taken() const {
  const Chunk& k = chunks_[0];
  return k.zero ? k.zero->steps_taken() : k.optimizer->steps_taken();
}

bool Trainer::needs_tokens() const { return stage_exec_->needs_tokens(); }

void Trainer::sync_params() {
  for (Chunk& k : chunks_)
    if (k.zero) k.zero->finish_param_all_gather();
}

double Trainer::pp_sum(double v) {
  if (!pp_sum_) return v;
  double t = 0;
  pp_sum_->sum(&v, &t, 1);
  return t;
}

void Trainer::sum_tied_grads(float* grads, size_t n) {
  CommWork w = embedding_->start_all_reduce(grads, n, DType::kF32, ReduceOp::kSum);
  tied_s_ += wait_timed(w, "wait tied embedding all_reduce");
}

double Trainer::grad_sq_sum_whole() {
  // Per chunk: the tensors this rank counts (tensor parallel: sharded ones on every rank,
  // replicated ones on rank 0; the tied embedding on the first stage only), summed over data
  // parallelism by ZeRO; then over the TP group and the pipeline, in rank order.
  double mine = 0;
  for (Chunk& k : chunks_) {
    const std::vector<char>* counted = k.counted.empty() ? nullptr : &k.counted;
    const GPT& m = *k.model;
    if (k.zero) {
      mine += k.zero->grad_sq_sum(counted);
    } else if (!counted) {
      mine += grad_sq_sum(m.grads(), m.num_params());
    } else {
      const auto& specs = m.param_specs();
      for (size_t i = 0; i < specs.size(); i++)
        if ((*counted)[i]) mine += grad_sq_sum(m.grads() + specs[i].offset, specs[i].numel());
    }
  }
  if (chunks_[0].tp) mine = chunks_[0].tp->sum_across_ranks(mine);
  return pp_sum(mine);
}

StepStats Trainer::train_step(const MicroBatches& next_micro_batch) {
  const Stopwatch watch;
  const int B = cfg_.train.batch_size, T = cfg_.train.seq_len, A = cfg_.train.grad_accum;
  const int N = B * T;
  tied_s_ = 0;
  for (Chunk& k : chunks_) {
    if (k.zero) k.zero->reset_exposed_seconds();
    if (k.tp) k.tp->reset_exposed_seconds();
    if (!k.grads_zeroed) k.model->zero_grad();  // the single-process optimizer clears them in its pass
    k.grads_zeroed = false;
  }
  // Every row counts equally in the step: dloss = 1 / (rows with a target in the whole step,
  // over all data-parallel ranks). Rows are never ignored by the loaders, so that is N * A * dp.
  const float dloss = 1.0f / (static_cast<float>(N) * A * dp_size_);
  const double loss_sum = stage_exec_->run_step(
      dloss, [&](int, int* in, int* tg) { next_micro_batch(in, tg); },
      [&](int c, int mb) {  // only the last micro-batch's backward reduces (ZeRO-2)
        if (chunks_[c].zero) chunks_[c].zero->arm_backward(mb == A - 1);
      });
  StepStats s;
  s.step = steps_taken() + 1;
  for (Chunk& k : chunks_) {
    if (k.zero) k.zero->finish_grad_reduce_scatter();  // sums the tied embedding's copies first
    else if (k.tied) sum_tied_grads(k.model->grads(), k.tied);
  }
  // The loss exists on the last stage: summed over data parallelism there, then over the
  // pipeline (0 + ... + loss: exact), so every rank reports the same value.
  // MEGASCALE_FAULT nan (obs/fault_injection.h): this rank's local loss of the step is NaN.
  const double local_loss = fault_nan_loss(s.step) ? std::nan("") : loss_sum;
  const double dp_loss = chunks_[0].zero ? chunks_[0].zero->sum_across_ranks(local_loss) : local_loss;
  s.loss = static_cast<float>(pp_sum(dp_loss) / (static_cast<double>(A) * dp_size_));
  // A non-finite loss (known to its data-parallel and pipeline peers) poisons these ranks' gradients,
  // as its backward would: the norm's sums carry it to the tensor-parallel peers too, so every rank
  // stops at the check below (an injected NaN; a real one has made the gradients NaN already).
  if (!std::isfinite(s.loss))
    for (Chunk& k : chunks_) {
      if (k.zero) std::fill_n(k.zero->shard_grads(), k.zero->layout().local_size(), std::nanf(""));
      else std::fill_n(k.model->grads(), k.model->num_params(), std::nanf(""));
    }
  // Sequence parallelism: LayerNorm and position-embedding gradients are partial over the TP group.
  for (Chunk& k : chunks_)
    if (k.tp) k.tp->all_reduce_partial_grads(k.zero ? k.zero->shard_grads() : k.model->grads(), k.partial_views);
  const double norm = std::sqrt(grad_sq_sum_whole());
  s.grad_norm = static_cast<float>(norm);
  // Every rank sees the same loss and norm (rank-order sums), so all stop together.
  MS_CHECK(std::isfinite(norm) && std::isfinite(s.loss),
           "step {}: loss {} / gradient norm {} is not finite; stopping before the update (nothing is exported)",
           s.step, s.loss, norm);
  const float scale = clip_scale(norm, cfg_.optim.grad_clip);
  s.lr = schedule_.at(s.step - 1);
  if (before_update_) before_update_();
  for (Chunk& k : chunks_) {
    if (k.zero) {
      k.zero->optimizer_step(s.lr, scale);
      k.zero->start_param_all_gather();  // overlaps the next step's data loading and forward
      s.comm_exposed_seconds += k.zero->exposed_seconds();
    } else {
      TraceScope span("optimizer");
      // Non-const params() marks the bf16 weight copy stale: the next forward converts it once,
      // unless the optimizer wrote it in its own pass (AdamW fuses the clipping scale and the copy).
      GPT& m = *k.model;
      float* params = m.params();
      if (k.optimizer->step(params, m.grads(), s.lr, scale, m.bf16_weight_copy(), /*zero_grads=*/true))
        m.mark_bf16_weights_fresh();
      k.grads_zeroed = true;
    }
    if (k.tp) s.tp_exposed_seconds += k.tp->exposed_seconds();
  }
  s.comm_exposed_seconds += tied_s_;
  s.pp_wait_seconds = stage_exec_->wait_seconds();
  s.compute_seconds = stage_exec_->compute_seconds();
  s.seconds = watch.seconds();
  return s;
}

float Trainer::eval_loss(int batches, const MicroBatches& next_micro_batch) {
  MS_CHECK(batches >= 1, "evaluation over {} batches", batches);
  const double sum = stage_exec_->run_forward_only(batches, [&](int, int* in, int* tg) { next_micro_batch(in, tg); });
  return static_cast<float>(pp_sum(sum) / batches);
}

std::vector<StateRun> Trainer::state_runs() {
  std::vector<StateRun> out;
  const bool tp_rank0 = size_of(tp_comm_) <= 1 || tp_comm_->rank() == 0;
  for (int c = 0; c < num_chunks(); c++) {
    Chunk& k = chunks_[c];
    const auto& specs = k.model->param_specs();
    auto owned = [&](size_t i) { return tp_rank0 || specs[i].sharded(); };
    const bool head_copy_chunk = k.tied && !k.model->has_embedding();
    if (k.zero) {
      float* P = k.zero->shard_params();
      float* M = k.zero->optimizer().moment1();
      float* V = k.zero->optimizer().moment2();
      for (const DpPiece& p : k.zero->layout().pieces()) {
        const size_t i = static_cast<size_t>(p.tensor);
        if (!owned(i)) continue;
        const size_t lo = p.global - specs[i].offset, at = p.view.offset;
        out.push_back({c, &specs[i], head_copy_chunk && i == 0, lo, lo + p.view.numel, P + at, M + at, V + at});
      }
    } else {
      const float* P = static_cast<const GPT&>(*k.model).params();
      float* M = k.optimizer->moment1();
      float* V = k.optimizer->moment2();
      for (size_t i = 0; i < specs.size(); i++) {
        if (!owned(i)) continue;
        const size_t at = specs[i].offset;
        out.push_back({c, &specs[i], head_copy_chunk && i == 0, 0, specs[i].numel(), P + at, M + at, V + at});
      }
    }
  }
  return out;
}

void Trainer::load_chunk_state(int c, const float* params, const float* m, const float* v, int steps_taken) {
  Chunk& k = chunks_[c];
  GPT& model = *k.model;
  const size_t n = model.num_params();
  if (k.zero) {
    k.zero->load_state(params, m, v, steps_taken);
  } else {
    std::memcpy(k.optimizer->moment1(), m, n * sizeof(float));
    std::memcpy(k.optimizer->moment2(), v, n * sizeof(float));
    k.optimizer->set_steps_taken(steps_taken);
  }
  std::memcpy(model.params(), params, n * sizeof(float));  // non-const params(): the bf16 copy goes stale
  k.grads_zeroed = false;
}

std::vector<float> Trainer::gather_whole_model() {
  // This stage's tensors, each whole (gathered over the TP group), in the whole model's order.
  std::vector<float> mine;
  std::vector<int> held;  // whole-model tensor index of each, in order
  const ParamLayout full = build_param_layout(cfg_.model);
  for (Chunk& k : chunks_) {
    std::vector<float> whole_chunk;
    if (k.tp) {
      whole_chunk = k.tp->gather_full_params();
    } else {
      const GPT& m = *k.model;
      whole_chunk.assign(m.params(), m.params() + m.num_params());
    }
    ModelShard layers;
    layers.layer_begin = k.model->shard().layer_begin, layers.layer_end = k.model->shard().layer_end;
    for (const ParamSpec& s : build_param_layout(cfg_.model, layers).specs) {
      mine.insert(mine.end(), whole_chunk.begin() + s.offset, whole_chunk.begin() + s.offset + s.numel());
      held.push_back(s.index);
    }
  }
  if (size_of(tp_comm_) > 1 && tp_comm_->rank() != 0) return {};
  auto place = [&](const std::vector<float>& src, const std::vector<int>& which, std::vector<float>& out) {
    size_t at = 0;
    for (int i : which) {
      const ParamSpec& s = full.specs[i];
      std::memcpy(out.data() + s.offset, src.data() + at, s.numel() * sizeof(float));
      at += s.numel();
    }
  };
  if (!pp_) {
    std::vector<float> out(full.total);
    place(mine, held, out);
    return out;
  }
  if (stage_ != 0) {
    pp_->send(mine.data(), mine.size() * sizeof(float), 0, 0);
    return {};
  }
  std::vector<float> out(full.total);
  place(mine, held, out);
  const int P = pp_->size(), v = static_cast<int>(chunks_.size());
  for (int r = 1; r < P; r++) {
    std::vector<int> theirs;
    size_t n = 0;
    for (int c = 0; c < v; c++) {
      const ModelShard layers = chunk_shard(cfg_, nullptr, c * P + r, P * v);
      for (const ParamSpec& s : build_param_layout(cfg_.model, layers).specs) theirs.push_back(s.index), n += s.numel();
    }
    std::vector<float> buf(n);
    pp_->recv(buf.data(), n * sizeof(float), r, 0);
    place(buf, theirs, out);
  }
  return out;
}

}  // namespace ms
