// parallel_model.cpp: see parallel_model.h.
#include "parallel/parallel_model.h"

#include <algorithm>  // std::fill_n
#include <cmath>      // std::nanf
#include <cstring>    // std::memcpy

#include <fmt/format.h>

#include "base/check.h"                   // MS_CHECK
#include "comm/communicator.h"            // Communicator
#include "kernels/backend.h"               // KernelBackend::fill
#include "model/hf_import.h"               // import_hf
#include "parallel/dp/zero_dp.h"          // ZeroDataParallel
#include "parallel/local_param_state.h"   // LocalParamState
#include "parallel/pp/pipeline_stage.h"   // PipelineStage
#include "parallel/rank_sum.h"            // RankOrderSum
#include "parallel/timed_wait.h"          // wait_timed
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

ParallelModel::ParallelModel(const Config& cfg, Communicator* dp, Communicator* tp, Communicator* pp,
                             Communicator* embedding, bool init_weights)
    : cfg_(cfg), pp_(size_of(pp) > 1 ? pp : nullptr), embedding_(embedding), tp_comm_(tp),
      stage_(pp_ ? pp_->rank() : 0), dp_size_(size_of(dp)) {
  const int P = size_of(pp_), v = pp_ ? cfg.parallel.virtual_stages : 1;
  const ScheduleSpec spec = schedule_spec(cfg, P);
  validate_schedule(spec, cfg.model.n_layer);
  const PipelineSchedule sch = build_schedule(spec);
  const std::vector<int> slots = activation_slots_needed(sch, stage_);
  chunks_.resize(v);
  std::vector<GPT*> models;
  for (int c = 0; c < v; c++) {
    build_chunk(chunks_[c], c, dp, tp, init_weights, slots[c]);
    models.push_back(chunks_[c].model.get());
  }
  stage_exec_ = std::make_unique<PipelineStage>(models, pp_, sch, cfg.train.batch_size, cfg.train.seq_len,
                                                cfg.parallel.pp_decoupled);
  if (pp_) pp_sum_ = std::make_unique<RankOrderSum>(*pp_, 1);
}

void ParallelModel::build_chunk(Chunk& k, int c, Communicator* dp, Communicator* tp, bool init_weights, int slots) {
  const Config& cfg = cfg_;
  const int P = size_of(pp_), G = P * (pp_ ? cfg.parallel.virtual_stages : 1);
  k.model = std::make_unique<GPT>(cfg.model, cfg.train.batch_size, cfg.train.seq_len, cfg.train.precision,
                                  chunk_shard(cfg, tp, c * P + stage_, G), slots, cfg.train.device);
  GPT& m = *k.model;
  if (init_weights) m.init_weights(static_cast<uint64_t>(cfg.train.seed));
  if (size_of(tp) > 1) {
    k.tp = std::make_unique<TensorParallel>(m, *tp, cfg.parallel,
                                            static_cast<size_t>(cfg.train.batch_size) * cfg.train.seq_len);
    k.counted = k.tp->counted();
  }
  // The tied token embedding's two copies (first and last stage): Megatron's embedding group
  // starts them equal (broadcast from the first stage) and sums their gradients every step.
  // An untied LM head has no copy to keep: each stage holds its own tensor.
  if (pp_ && m.tied_embedding() && (m.has_embedding() || m.has_head())) {
    MS_CHECK(embedding_ && embedding_->size() == 2, "pipeline: stage {} holds a copy of the tied embedding but has "
             "no embedding group", stage_);
    const ParamSpec& wte = m.spec(token_embedding_name(cfg.model));
    MS_CHECK(wte.offset == 0, "pipeline: the tied embedding must start the chunk's parameters");
    k.tied = wte.numel();
    if (init_weights) embedding_->broadcast(m.params(), k.tied, DType::kF32, 0, stream_order_of(m));
    if (!m.has_embedding()) {  // the head's copy: the norm counts the embedding stage's copy only
      if (k.counted.empty()) k.counted.assign(m.param_specs().size(), 1);
      k.counted[0] = 0;
    }
  }
  if (dp_size_ > 1) k.state = std::make_unique<ZeroDataParallel>(m, *dp, cfg.parallel, cfg.optim);
  else k.state = std::make_unique<LocalParamState>(m, cfg.optim);
  if (k.tp) {
    k.partial_views = k.state->owned_views(k.tp->grad_partial());
    if (cfg.optim.name == OptimizerKind::kLamb)
      k.state->set_tensor_norm_reduce([t = k.tp.get()](double* w, double* r) { t->reduce_tensor_norms(w, r); });
  }
  if (k.tied)
    k.state->set_grad_combine(k.tied, [this, n = k.tied, on = stream_order_of(m)](float* g) { sum_tied_grads(g, n, on); });
}

ParallelModel::~ParallelModel() = default;

void ParallelModel::init_weights_now() {
  for (Chunk& k : chunks_) {
    GPT& m = *k.model;
    m.init_weights(static_cast<uint64_t>(cfg_.train.seed));
    if (k.tied) embedding_->broadcast(m.params(), k.tied, DType::kF32, 0, stream_order_of(m));
    k.state->reset_from_model();
  }
}

void ParallelModel::import_hf_now(const std::string& dir) {
  for (Chunk& k : chunks_) {
    import_hf(*k.model, dir);
    k.state->reset_from_model();
  }
}

bool ParallelModel::needs_tokens() const { return stage_exec_->needs_tokens(); }

void ParallelModel::sync_params() {
  for (Chunk& k : chunks_) k.state->finish_param_gather();
}

double ParallelModel::pp_sum(double v) {
  if (!pp_sum_) return v;
  double t = 0;
  pp_sum_->sum(&v, &t, 1);
  return t;
}

void ParallelModel::sum_tied_grads(float* grads, size_t n, const StreamOrder& on) {
  CommWork w = embedding_->start_all_reduce(grads, n, DType::kF32, ReduceOp::kSum, on);
  tied_s_ += wait_timed(w, "wait tied embedding all_reduce", on);
}

double ParallelModel::run_micro_batches(float dloss, const Tokens& next_micro_batch) {
  const int A = cfg_.train.grad_accum;
  tied_s_ = 0;
  for (Chunk& k : chunks_) {
    k.state->begin_step();
    if (k.tp) k.tp->reset_exposed_seconds();
  }
  return stage_exec_->run_step(
      dloss, [&](int, int* in, int* tg) { next_micro_batch(in, tg); },
      [&](int c, int mb) { chunks_[c].state->arm_grad_reduce(mb == A - 1); });  // ZeRO-2: the last one reduces
}

void ParallelModel::finish_grad_reduce() {
  for (Chunk& k : chunks_) k.state->finish_grad_reduce();  // sums the tied embedding's copies first
}

double ParallelModel::sum_loss(double local) {
  // The loss exists on the last stage: summed over data parallelism there, then over the pipeline
  // (0 + ... + loss: exact), so every rank holds the same value.
  return pp_sum(chunks_[0].state->sum_over_replicas(local));
}

void ParallelModel::poison_grads() {
  // The owner's buffer lives on the model's device (ZeRO's shard: host memory, on the CPU only).
  for (Chunk& k : chunks_) k.model->kernels().fill(k.state->owned_grads(), std::nanf(""), k.state->owned_size());
}

void ParallelModel::all_reduce_partial_grads() {
  for (Chunk& k : chunks_)
    if (k.tp) k.tp->all_reduce_partial_grads(k.state->owned_grads(), k.partial_views);
}

double ParallelModel::grad_sq_sum() {
  // Per chunk: the tensors this rank counts (tensor parallel: sharded ones on every rank,
  // replicated ones on rank 0; the tied embedding on the first stage only), summed over data
  // parallelism by its state; then over the TP group and the pipeline, in rank order.
  double mine = 0;
  for (Chunk& k : chunks_) mine += k.state->grad_sq_sum(k.counted.empty() ? nullptr : &k.counted);
  if (chunks_[0].tp) mine = chunks_[0].tp->sum_across_ranks(mine);
  return pp_sum(mine);
}

void ParallelModel::update(float lr, float grad_scale) {
  for (Chunk& k : chunks_) k.state->update(lr, grad_scale);
}

StepTimings ParallelModel::step_timings() const {
  StepTimings t;
  for (const Chunk& k : chunks_) {
    t.dp_exposed += k.state->exposed_seconds();
    if (k.tp) t.tp_exposed += k.tp->exposed_seconds();
  }
  t.dp_exposed += tied_s_;
  t.pp_wait = stage_exec_->wait_seconds();
  t.compute = stage_exec_->compute_seconds();
  return t;
}

double ParallelModel::forward_only_loss_sum(int batches, const Tokens& next_micro_batch) {
  return pp_sum(stage_exec_->run_forward_only(batches, [&](int, int* in, int* tg) { next_micro_batch(in, tg); }));
}

std::vector<std::pair<size_t, size_t>> ParallelModel::owned_ranges(int c, int replicas, int rank) const {
  return ZeroDataParallel::owned_ranges(*chunks_[c].model, cfg_.parallel, cfg_.optim, replicas, rank);
}

std::string ParallelModel::describe() const {
  std::string out;
  if (cfg_.parallel.tp > 1) {
    const GPT::Footprint fp = chunks_[0].model->footprint();
    out += fmt::format("; tensor parallel: {} parameters and {} logits per rank, sequence parallel {}, {} chunk(s) "
                       "per region", fp.params, fp.logits, cfg_.parallel.sequence_parallel ? "on" : "off",
                       cfg_.parallel.sequence_parallel ? cfg_.parallel.tp_chunks : 1);
  }
  if (cfg_.parallel.pp > 1)
    out += fmt::format("; pipeline: schedule {}, {} chunk(s) of {} layers per stage, {} micro-batches per step",
                       config_name(cfg_.parallel.schedule), num_chunks(), chunks_[0].model->num_layers(),
                       cfg_.train.grad_accum);
  const std::string state = chunks_[0].state->describe();
  if (!state.empty()) out += "; " + state;
  return out;
}

std::vector<StateRun> ParallelModel::own_state_runs() {
  std::vector<StateRun> out;
  for (int c = 0; c < num_chunks(); c++) {
    Chunk& k = chunks_[c];
    k.state->append_state_runs(c, std::vector<char>(k.model->param_specs().size(), 1), -1, out);
  }
  return out;
}

std::vector<StateRun> ParallelModel::state_runs() {
  std::vector<StateRun> out;
  const bool tp_rank0 = size_of(tp_comm_) <= 1 || tp_comm_->rank() == 0;
  for (int c = 0; c < num_chunks(); c++) {
    Chunk& k = chunks_[c];
    const auto& specs = k.model->param_specs();
    std::vector<char> owned(specs.size());
    for (size_t i = 0; i < specs.size(); i++) owned[i] = tp_rank0 || specs[i].sharded();
    const bool head_copy_chunk = k.tied && !k.model->has_embedding();
    k.state->append_state_runs(c, owned, head_copy_chunk ? 0 : -1, out);
  }
  return out;
}

void ParallelModel::load_chunk_state(int c, const float* params, const float* m, const float* v, int steps_taken) {
  chunks_[c].state->load_state(params, m, v, steps_taken);
}

void ParallelModel::load_own_runs(const float* packed, size_t floats, int steps_taken,
                                  const std::vector<PeerRuns>& peers) {
  const int dp = cfg_.parallel.dp;
  const bool gather = peers.empty();
  MS_CHECK(gather || (int)peers.size() == dp - 1, "restore: {} other replicas' runs given, {} exist", peers.size(),
           dp - 1);
  std::vector<size_t> peer_read(peers.size(), 0);
  size_t read = 0;
  for (Chunk& k : chunks_) {
    // Each chunk's runs are counted before reading so a short payload never reads past its end.
    std::vector<StateRun> runs;
    k.state->append_state_runs(0, std::vector<char>(k.model->param_specs().size(), 1), -1, runs);
    size_t need = 0;
    for (const StateRun& r : runs) need += 3 * (r.hi - r.lo);
    MS_CHECK(read + need <= floats, "restore: the packed state holds {} floats, chunk needs {} more after {}", floats,
             need, read);
    read += k.state->load_own_runs(packed + read, steps_taken, gather);
    for (size_t i = 0; i < peers.size(); i++)
      peer_read[i] += k.state->load_replica_weights(peers[i].replica, peers[i].packed + peer_read[i],
                                                    peers[i].floats - peer_read[i]);
  }
  for (size_t i = 0; i < peers.size(); i++)
    MS_CHECK(peer_read[i] == peers[i].floats, "restore: replica {}'s packed state holds {} floats, its runs {}",
             peers[i].replica, peers[i].floats, peer_read[i]);
  MS_CHECK(read == floats, "restore: the packed state holds {} floats, this rank's runs {}", floats, read);
}

std::vector<float> ParallelModel::gather_stage_tensors(std::vector<int>& held) {
  // This stage's tensors, each whole (gathered over the TP group), in the whole model's order.
  std::vector<float> mine;
  for (Chunk& k : chunks_) {
    std::vector<float> whole_chunk;
    if (k.tp) {
      whole_chunk = k.tp->gather_full_params();
    } else {
      const GPT& m = *k.model;
      whole_chunk.resize(m.num_params());
      m.copy_params_to_host(whole_chunk.data());
    }
    ModelShard layers;
    layers.layer_begin = k.model->shard().layer_begin, layers.layer_end = k.model->shard().layer_end;
    for (const ParamSpec& s : build_param_layout(cfg_.model, layers).specs) {
      mine.insert(mine.end(), whole_chunk.begin() + s.offset, whole_chunk.begin() + s.offset + s.numel());
      held.push_back(s.index);
    }
  }
  return mine;
}

std::vector<float> ParallelModel::gather_whole_model() {
  std::vector<int> held;  // whole-model tensor index of each, in order
  const std::vector<float> mine = gather_stage_tensors(held);
  if (size_of(tp_comm_) > 1 && tp_comm_->rank() != 0) return {};
  const ParamLayout full = build_param_layout(cfg_.model);
  auto place = [&](const std::vector<float>& src, const std::vector<int>& which, std::vector<float>& out) {
    size_t at = 0;
    for (int i : which) {
      const ParamSpec& s = full.specs[i];
      std::memcpy(out.data() + s.offset, src.data() + at, s.numel() * sizeof(float));
      at += s.numel();
    }
  };
  if (pp_ && stage_ != 0) {
    pp_->send(mine.data(), mine.size() * sizeof(float), 0, 0);
    return {};
  }
  std::vector<float> out(full.total);
  place(mine, held, out);
  const int P = size_of(pp_), v = num_chunks();
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
