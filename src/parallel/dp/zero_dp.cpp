// zero_dp.cpp: see zero_dp.h.
#include "parallel/dp/zero_dp.h"

#include <algorithm>
#include <cstdlib>  // std::getenv, std::atof
#include <cstring>

#include <fmt/format.h>

#include "base/check.h"
#include "kernels/backend.h"        // KernelBackend::copy, fill, delay
#include "optim/decay_policy.h"  // optimizer_tensors
#include "optim/grad_norm.h"  // grad_sq_sum, scale_inplace
#include "obs/trace_sink.h"  // TraceScope
#include "parallel/timed_wait.h"  // wait_timed

namespace ms {

namespace {
// This rank's pieces of every tensor, as optimizer views into the shard buffers.
std::vector<ParamTensor> piece_views(const DpBucketLayout& layout) {
  std::vector<ParamTensor> v;
  for (const DpPiece& p : layout.pieces()) v.push_back(p.view);
  return v;
}

size_t bucket_elems(const ParallelConfig& parallel) {
  return std::max<size_t>(1, static_cast<size_t>(parallel.bucket_mb * 1024.0 * 1024.0 / sizeof(float)));
}
}  // namespace

ZeroDataParallel::ZeroDataParallel(GPT& model, Communicator& dp, const ParallelConfig& parallel,
                                   const OptimConfig& optim)
    : model_(model), comm_(dp), overlap_(parallel.overlap), bucket_mb_(parallel.bucket_mb),
      layout_(model.num_params(), dp.size(), dp.rank(), bucket_elems(parallel),
              optimizer_tensors(model.param_specs(), optim)),
      optim_tensors_(optimizer_tensors(model.param_specs(), optim)),
      bucket_elems_(bucket_elems(parallel)),
      optimizer_(optim, piece_views(layout_), layout_.local_size(), model.device()),
      rank_sum_(dp, 2 * std::max<size_t>(layout_.num_tensors(), 1)) {
  const size_t local = layout_.local_size(), nb = layout_.buckets().size();
  const Device dev = model.device();
  on_ = stream_order_of(model);
  shard_params_.resize(local, dev);
  shard_grads_.resize(local, dev);
  if (const char* d = std::getenv("MEGASCALE_TEST_DELAY_BACKWARD_MS")) delay_backward_ms_ = std::atof(d);
  // Invariants the overlap relies on, asserted: buckets run from the end of the buffer to offset 0
  // (backward completion order; the token embedding at offset 0, complete only at the end of
  // backward unless split as below), and only the bucket at offset 0 is padded, so one staging
  // buffer per use suffices. The reduce-scatter input and the all-gather output of the padded
  // bucket have buffers of their own.
  size_t stage = 0, staged_buckets = 0;
  for (size_t b = 0; b < nb; b++) {
    const DpBucket& k = layout_.buckets()[b];
    MS_CHECK(k.end == (b == 0 ? layout_.numel() : layout_.buckets()[b - 1].start) && k.start < k.end,
             "ZeRO-2: bucket {} [{}, {}) does not continue the backward order", b, k.start, k.end);
    if (staged(b)) stage = std::max(stage, k.padded(comm_.size())), staged_buckets++;
  }
  MS_CHECK(nb == 0 || layout_.buckets().back().start == 0, "ZeRO-2: the buckets do not reach offset 0");
  MS_CHECK(staged_buckets <= 1 && (staged_buckets == 0 || staged(nb - 1)),
           "ZeRO-2: {} padded buckets; only the one at offset 0 may be padded", staged_buckets);
  rs_staging_.resize(std::max<size_t>(stage, 1), dev);
  ag_staging_.resize(std::max<size_t>(stage, 1), dev);
  rs_.resize(nb);
  ag_.resize(nb);
  ag_pending_.assign(nb, 0);
  const size_t nt = layout_.num_tensors();
  sums_in_.resize(2 * nt); sums_out_.resize(2 * nt);
  // The shard of the initial weights (identical on every rank: same seed).
  const float* P = static_cast<const GPT&>(model_).params();
  for (size_t b = 0; b < nb; b++) {
    const size_t lo = layout_.owned_lo(b), hi = layout_.owned_hi(b);
    if (hi > lo) model_.kernels().copy(shard_params_.data() + layout_.buckets()[b].local, P + lo, hi - lo);
  }
  // The tied embedding split (zero_dp.h): [0, tied_hi_) is the token embedding; the buckets wholly
  // inside it are the last ones (tied_first_..nb-1); this rank's owned runs of it, for the rows.
  split_tied_ = model_.has_embedding() && model_.has_head() && model_.tied_embedding() && model_.device() == Device::kCpu;
  if (split_tied_) {
    MS_CHECK(model_.token_embedding_range().first == 0, "ZeRO-2: the token embedding does not start the buffer");
    MS_CHECK(model_.config().vocab_size < (1 << 24), "ZeRO-2: vocabulary of {} ids: an id no longer fits a float "
             "exactly (the token rows' all-gather)", model_.config().vocab_size);
    tied_hi_ = model_.token_embedding_range().second;
    tied_first_ = nb;
    while (tied_first_ > 0 && layout_.buckets()[tied_first_ - 1].end <= tied_hi_) tied_first_--;
    for (size_t b = 0; b < nb; b++) {
      const size_t lo = layout_.owned_lo(b), hi = std::min(layout_.owned_hi(b), tied_hi_);
      if (lo < hi) tied_owned_.push_back({lo, hi, layout_.buckets()[b].local});
    }
  }
  if (optim.name == OptimizerKind::kLamb)
    optimizer_.set_norm_reduce([this](double* w_sq, double* r_sq) { reduce_lamb_norms(w_sq, r_sq); });
  model_.set_grad_ready_hook([this](size_t lo, size_t hi) { on_grad_ready(lo, hi); });
  model_.set_param_wait_hook([this](size_t lo, size_t hi) { on_param_wait(lo, hi); });
}

ZeroDataParallel::~ZeroDataParallel() {
  model_.set_grad_ready_hook(nullptr);
  model_.set_param_wait_hook(nullptr);
  // The comm thread must not write into freed buffers: drain what is in flight.
  std::vector<CommWork*> works = {&rows_ag_};
  for (auto* list : {&rs_, &ag_})
    for (CommWork& w : *list) works.push_back(&w);
  for (CommWork* w : works) {
    if (!w->valid()) continue;
    try {
      w->wait();
    } catch (const std::exception&) {
      // Already failing: the error that matters was reported by whoever waited first.
    }
  }
}

bool ZeroDataParallel::staged(size_t b) const {
  const DpBucket& k = layout_.buckets()[b];
  return k.padded(comm_.size()) != k.end - k.start;
}

void ZeroDataParallel::arm_backward(bool last_micro_batch) {
  armed_ = last_micro_batch;
  if (armed_ && delay_backward_ms_ > 0) model_.kernels().delay(delay_backward_ms_);
  split_armed_ = armed_ && split_tied_;
  if (split_armed_) model_.defer_token_grad();
}

void ZeroDataParallel::on_grad_ready(size_t lo, size_t hi) {
  // The split tied embedding's head part comes first, out of order: its buckets start now.
  if (split_armed_ && lo == 0 && hi == tied_hi_) {
    if (overlap_) start_tied_head_reduce_scatters();
    return;
  }
  // The model reports ranges in decreasing offset order, once per backward (model/gpt.h); a bucket
  // is started when the range reaching its start arrives, which relies on that order.
  if (hi == layout_.numel()) last_ready_lo_ = hi;  // a new backward
  MS_CHECK(hi <= last_ready_lo_ && lo < hi, "ZeRO-2: gradient range [{}, {}) arrived out of backward order (after {})",
           lo, hi, last_ready_lo_);
  last_ready_lo_ = lo;
  if (!armed_ || !overlap_) return;
  const auto& bk = layout_.buckets();
  // Split: below tied_hi_ only the head's part remains, already final; the buckets wholly inside
  // the embedding have started.
  const size_t floor = split_armed_ && lo <= tied_hi_ ? 0 : lo, end = split_armed_ ? tied_first_ : bk.size();
  while (next_rs_ < end && bk[next_rs_].start >= floor && !deferred(next_rs_)) start_grad_reduce_scatter(next_rs_++);
}

void ZeroDataParallel::start_tied_head_reduce_scatters() {
  if (tied_started_) return;
  for (size_t b = tied_first_; b < layout_.buckets().size(); b++) start_grad_reduce_scatter(b);
  tied_started_ = true;
}

void ZeroDataParallel::start_token_rows_all_gather() {
  // One all-gather of N rows and then N ids per rank; an id travels as a float (exact below 2^24,
  // checked at construction), the element types the collectives carry being fp32 and bf16.
  const size_t N = static_cast<size_t>(model_.token_grad_count()), C = static_cast<size_t>(model_.config().n_embd);
  MS_CHECK(N > 0, "ZeRO-2: the backward left no token embedding rows");
  const size_t per_rank = N * (C + 1), dp = static_cast<size_t>(comm_.size());
  if (rows_send_.size() != per_rank) rows_send_.resize(per_rank), rows_recv_.resize(dp * per_rank);
  std::memcpy(rows_send_.data(), model_.token_grad_rows(), N * C * sizeof(float));
  const int* ids = model_.token_ids();
  for (size_t i = 0; i < N; i++) rows_send_[N * C + i] = static_cast<float>(ids[i]);
  rows_ag_ = comm_.start_all_gather(rows_send_.data(), rows_recv_.data(), per_rank, DType::kF32);
}

void ZeroDataParallel::finish_token_rows_all_gather() {
  exposed_s_ += wait_timed(rows_ag_, "wait token rows all_gather");
  const size_t C = static_cast<size_t>(model_.config().n_embd), per_rank = rows_send_.size(), N = per_rank / (C + 1);
  const int v0 = model_.vocab_offset(), v1 = v0 + model_.local_vocab();
  float* shard = shard_grads_.data();
  // Ranks in order, rows in order: each owned element adds its token rows as the model would.
  for (size_t q = 0; q < static_cast<size_t>(comm_.size()); q++) {
    const float* rows = rows_recv_.data() + q * per_rank;
    for (size_t i = 0; i < N; i++) {
      const int id = static_cast<int>(rows[N * C + i]);
      if (id < v0 || id >= v1) continue;
      const size_t at = static_cast<size_t>(id - v0) * C;
      const float* d = rows + i * C;
      for (const OwnedRun& r : tied_owned_) {
        const size_t a = std::max(r.lo, at), z = std::min(r.hi, at + C);
        for (size_t g = a; g < z; g++) shard[r.local + (g - r.lo)] += d[g - at];
      }
    }
  }
}

void ZeroDataParallel::set_deferred_prefix(size_t hi, std::function<void(float*)> combine) {
  MS_CHECK(hi <= layout_.numel(), "ZeRO-2: deferred prefix [0, {}) outside the {} gradients", hi, layout_.numel());
  MS_CHECK(!split_tied_, "ZeRO-2: a deferred prefix on a chunk that holds both the embedding and the head");
  // Deferred buckets must be the tail of the backward order (so the others may start before them):
  // once a bucket is deferred, every later one (lower offsets) is too.
  const auto& bk = layout_.buckets();
  for (size_t b = 1; b < bk.size(); b++)
    MS_CHECK(!(bk[b - 1].start < hi) || bk[b].start < hi, "ZeRO-2: deferred bucket {} is followed by bucket {}, "
             "which is not", b - 1, b);
  deferred_hi_ = hi;
  combine_ = std::move(combine);
}

void ZeroDataParallel::start_grad_reduce_scatter(size_t b) {
  const DpBucket& k = layout_.buckets()[b];
  const float* G = static_cast<const GPT&>(model_).grads();
  const float* in = G + k.start;
  if (staged(b)) {
    const size_t n = k.end - k.start, padded = k.padded(comm_.size());
    model_.kernels().copy(rs_staging_.data(), in, n);
    model_.kernels().fill(rs_staging_.data() + n, 0.0f, padded - n);
    in = rs_staging_.data();
  }
  rs_[b] = comm_.start_reduce_scatter(in, shard_grads_.data() + k.local, k.shard, DType::kF32, ReduceOp::kSum, on_);
}

void ZeroDataParallel::finish_grad_reduce_scatter() {
  const size_t nb = layout_.buckets().size(), end = split_armed_ ? tied_first_ : nb;
  if (split_armed_) start_tied_head_reduce_scatters();  // overlap off
  while (next_rs_ < end && !deferred(next_rs_)) start_grad_reduce_scatter(next_rs_++);  // overlap off, or not armed
  if (next_rs_ < end && combine_) {
    TraceScope span("grad-combine");
    combine_(model_.grads());
  }
  while (next_rs_ < end) start_grad_reduce_scatter(next_rs_++);
  if (split_armed_) start_token_rows_all_gather();
  for (size_t b = 0; b < nb; b++) exposed_s_ += wait_timed(rs_[b], "wait reduce_scatter", on_);
  if (split_armed_) finish_token_rows_all_gather();
  next_rs_ = 0;
  armed_ = split_armed_ = tied_started_ = false;
}

double ZeroDataParallel::sum_across_ranks(double v) {
  double t = 0;
  exposed_s_ += rank_sum_.sum(&v, &t, 1);
  return t;
}

double ZeroDataParallel::grad_sq_sum(const std::vector<char>* counted) {
  double mine = 0;
  const auto& pieces = layout_.pieces();
  for (const DpPiece& p : pieces)
    if (!counted || (*counted)[p.tensor])
      mine += ms::grad_sq_sum(shard_grads_.data() + p.view.offset, p.view.numel, on_.device);
  return sum_across_ranks(mine);
}

std::vector<ParamTensor> ZeroDataParallel::shard_views(const std::vector<char>& which) const {
  std::vector<ParamTensor> out;
  for (const DpPiece& p : layout_.pieces())
    if (which[p.tensor]) out.push_back(p.view);
  return out;
}

void ZeroDataParallel::optimizer_step(float lr, float grad_scale) {
  TraceScope span("optimizer");
  // The bf16 weight copy is not written here: the all-gather delivers fp32 weights and the next
  // forward converts them range by range as they arrive (model/gpt.h).
  optimizer_.step(shard_params_.data(), shard_grads_.data(), lr, grad_scale);
}

void ZeroDataParallel::reduce_lamb_norms(double* w_sq, double* r_sq) {
  // Whole-tensor norms: this rank's pieces per tensor, then all ranks, in rank order.
  const size_t nt = layout_.num_tensors();
  std::fill(sums_in_.begin(), sums_in_.end(), 0.0);
  const auto& pieces = layout_.pieces();
  for (size_t i = 0; i < pieces.size(); i++) {
    sums_in_[pieces[i].tensor] += w_sq[i];
    sums_in_[nt + pieces[i].tensor] += r_sq[i];
  }
  exposed_s_ += rank_sum_.sum(sums_in_.data(), sums_out_.data(), 2 * nt);
  if (tensor_norm_reduce_) tensor_norm_reduce_(sums_out_.data(), sums_out_.data() + nt);
  for (size_t i = 0; i < pieces.size(); i++) {
    w_sq[i] = sums_out_[pieces[i].tensor];
    r_sq[i] = sums_out_[nt + pieces[i].tensor];
  }
}

void ZeroDataParallel::start_param_all_gather() {
  float* P = model_.params();  // non-const: marks the bf16 weight copy stale
  const auto& bk = layout_.buckets();
  for (size_t i = bk.size(); i-- > 0;) {  // forward order: embeddings first
    const DpBucket& k = bk[i];
    float* out = staged(i) ? ag_staging_.data() : P + k.start;
    ag_[i] = comm_.start_all_gather(shard_params_.data() + k.local, out, k.shard, DType::kF32, on_);
    ag_pending_[i] = 1;
  }
  if (!overlap_) finish_param_all_gather();
}

void ZeroDataParallel::finish_param_all_gather(size_t b) {
  if (!ag_pending_[b]) return;
  exposed_s_ += wait_timed(ag_[b], "wait all_gather", on_);
  ag_pending_[b] = 0;
  if (staged(b)) {
    const DpBucket& k = layout_.buckets()[b];
    float* P = model_.params();
    model_.kernels().copy(P + k.start, ag_staging_.data(), k.end - k.start);
  }
}

void ZeroDataParallel::finish_param_all_gather() {
  for (size_t i = layout_.buckets().size(); i-- > 0;) finish_param_all_gather(i);
}

void ZeroDataParallel::on_param_wait(size_t lo, size_t hi) {
  const auto& bk = layout_.buckets();
  for (size_t i = bk.size(); i-- > 0;)
    if (ag_pending_[i] && bk[i].start < hi && bk[i].end > lo) finish_param_all_gather(i);
}

std::vector<std::pair<size_t, size_t>> ZeroDataParallel::owned_ranges(const GPT& model,
                                                                      const ParallelConfig& parallel,
                                                                      const OptimConfig& optim, int dp, int rank) {
  const DpBucketLayout layout(model.num_params(), dp, rank, bucket_elems(parallel),
                              optimizer_tensors(model.param_specs(), optim));
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t b = 0; b < layout.buckets().size(); b++)
    if (layout.owned_hi(b) > layout.owned_lo(b)) out.push_back({layout.owned_lo(b), layout.owned_hi(b)});
  return out;
}

void ZeroDataParallel::load_state(const float* params, const float* m, const float* v, int steps_taken) {
  finish_param_all_gather();
  // The arguments are host memory; the shards and moments live on the model's device.
  float* M = optimizer_.moment1();
  float* V = optimizer_.moment2();
  const Device dev = on_.device;
  for (const DpPiece& p : layout_.pieces()) {
    const size_t n = p.view.numel, at = p.view.offset, bytes = n * sizeof(float);
    copy_bytes(shard_params_.data() + at, dev, params + p.global, Device::kCpu, bytes);
    copy_bytes(M + at, dev, m + p.global, Device::kCpu, bytes);
    copy_bytes(V + at, dev, v + p.global, Device::kCpu, bytes);
  }
  if (dev == Device::kCuda) stream_sync({});
  optimizer_.set_steps_taken(steps_taken);
  if (dev == Device::kCuda) {
    model_.load_params(params);  // the bf16 copy goes stale
  } else {
    float* P = model_.params();  // non-const params(): the bf16 copy goes stale
    if (params != P) std::memcpy(P, params, model_.num_params() * sizeof(float));
  }
}

size_t ZeroDataParallel::load_replica_weights(int replica, const float* packed, size_t available) {
  MS_CHECK(replica >= 0 && replica < comm_.size() && replica != comm_.rank(),
           "restore: replica {} is not another rank of this data-parallel group of {}", replica, comm_.size());
  const DpBucketLayout peer(model_.num_params(), comm_.size(), replica, bucket_elems_, optim_tensors_);
  size_t need = 0;
  for (const DpPiece& p : peer.pieces()) need += 3 * p.view.numel;
  MS_CHECK(need <= available, "restore: replica {}'s packed state holds {} floats, its runs {}", replica, available,
           need);
  float* P = model_.params();  // non-const: the bf16 copy goes stale
  const Device dev = on_.device;
  size_t read = 0;
  for (const DpPiece& p : peer.pieces()) {  // its append_state_runs' order: weights, m, v per piece
    copy_bytes(P + p.global, dev, packed + read, Device::kCpu, p.view.numel * sizeof(float));
    read += 3 * p.view.numel;
  }
  if (dev == Device::kCuda) stream_sync({});
  return read;
}

size_t ZeroDataParallel::load_own_runs(const float* packed, int steps_taken, bool gather) {
  finish_param_all_gather();
  float* M = optimizer_.moment1();
  float* V = optimizer_.moment2();
  const Device dev = on_.device;
  size_t read = 0;
  for (const DpPiece& p : layout_.pieces()) {  // append_state_runs' order
    const size_t n = p.view.numel, at = p.view.offset, bytes = n * sizeof(float);
    copy_bytes(shard_params_.data() + at, dev, packed + read, Device::kCpu, bytes);
    copy_bytes(M + at, dev, packed + read + n, Device::kCpu, bytes);
    copy_bytes(V + at, dev, packed + read + 2 * n, Device::kCpu, bytes);
    read += 3 * n;
  }
  if (dev == Device::kCuda) stream_sync({});
  optimizer_.set_steps_taken(steps_taken);
  if (!gather) {  // the caller loads the other replicas' weights (load_replica_weights); this one's here
    float* P = model_.params();
    for (const DpPiece& p : layout_.pieces())
      copy_bytes(P + p.global, dev, shard_params_.data() + p.view.offset, dev, p.view.numel * sizeof(float));
    if (dev == Device::kCuda) stream_sync({});
    return read;
  }
  // The model's weights from every replica's shard: the all-gather that follows each update,
  // finished here (measured: overlapping it with the first step's forward made that step longer by
  // more than the restore saved, on shared cores).
  start_param_all_gather();
  finish_param_all_gather();
  return read;
}

void ZeroDataParallel::begin_step() {
  reset_exposed_seconds();
  model_.zero_grad();
}

void ZeroDataParallel::update(float lr, float grad_scale) {
  optimizer_step(lr, grad_scale);
  start_param_all_gather();  // overlaps the next step's data loading and forward
}

void ZeroDataParallel::reset_from_model() {
  // The shards of the model's weights, zero moments, no step taken: the constructor's state.
  const std::vector<float> zeros(model_.num_params(), 0.0f);
  if (on_.device == Device::kCuda) {  // load_state reads host memory
    std::vector<float> params(model_.num_params());
    model_.copy_params_to_host(params.data());
    load_state(params.data(), zeros.data(), zeros.data(), 0);
    return;
  }
  load_state(static_cast<const GPT&>(model_).params(), zeros.data(), zeros.data(), 0);
}

void ZeroDataParallel::append_state_runs(int chunk, const std::vector<char>& owned, int head_copy_tensor,
                                         std::vector<StateRun>& out) {
  const auto& specs = model_.param_specs();
  float* P = shard_params();
  float* M = optimizer_.moment1();
  float* V = optimizer_.moment2();
  for (const DpPiece& p : layout_.pieces()) {
    const size_t i = static_cast<size_t>(p.tensor);
    if (!owned[i]) continue;
    const size_t lo = p.global - specs[i].offset, at = p.view.offset;
    out.push_back({chunk, &specs[i], p.tensor == head_copy_tensor, lo, lo + p.view.numel, P + at, M + at, V + at,
                   on_.device});
  }
}

std::string ZeroDataParallel::describe() const {
  return fmt::format("ZeRO-2: {} buckets of <= {} MiB, optimizer state {:.1f} MiB per rank, overlap {}",
                     layout_.buckets().size(), bucket_mb_, state_bytes() / 1048576.0, overlap_ ? "on" : "off");
}

size_t ZeroDataParallel::state_bytes() const {
  return (shard_params_.size() + shard_grads_.size() + rs_staging_.size() + ag_staging_.size()) * sizeof(float) +
         optimizer_.state_bytes();
}

}  // namespace ms
