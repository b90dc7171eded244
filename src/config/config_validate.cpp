// config_validate.cpp: the value checks of the config tree (config.h). Each section's validate()
// checks the fields of its own section; Config::validate() runs them, in declaration order, then
// the checks that relate fields of different sections. Every message names the key and the reason.
#include <algorithm>  // std::max
#include <cmath>      // std::isfinite
#include <cstdint>

#include "base/check.h"  // MS_CHECK
#include "config/config.h"

namespace ms {

void ModelConfig::apply_preset() {
  const bool llama = preset == ModelPreset::kLlama;
  norm = llama ? NormKind::kRmsNorm : NormKind::kLayerNorm;
  positions = llama ? PositionKind::kRope : PositionKind::kLearned;
  mlp = llama ? MlpKind::kSwiglu : MlpKind::kGelu;
  tie_embeddings = !llama;
  bias = llama ? BiasKind::kNone : BiasKind::kAll;
}

void ModelConfig::validate() const {
  // Token ids are int32 in memory; the shard format bounds what a corpus can hold (data/).
  MS_CHECK(vocab_size > 0 && vocab_size <= (1 << 24), "config: model.vocab_size={} must be in 1..16777216", vocab_size);
  // Upper bounds keep every size product (Vp, 3C, 4C, 4C x C, Vp x C, max_seq_len x C) inside int.
  MS_CHECK(pad_vocab_to > 0 && pad_vocab_to <= 65536, "config: model.pad_vocab_to={} must be in 1..65536",
           pad_vocab_to);
  MS_CHECK(n_layer > 0 && n_layer <= 65536, "config: model.n_layer={} must be in 1..65536", n_layer);
  MS_CHECK(n_embd > 0 && n_embd <= 16384, "config: model.n_embd={} must be in 1..16384 (the MLP's 4 x n_embd^2 "
           "weights must stay within 32-bit sizes)", n_embd);
  MS_CHECK(n_head > 0 && n_embd % n_head == 0,
           "config: model.n_head={} does not divide model.n_embd={}", n_head, n_embd);
  MS_CHECK(n_kv_head >= 0 && n_kv_head <= n_head && (n_kv_head == 0 || n_head % n_kv_head == 0),
           "config: model.n_kv_head={} must divide model.n_head={} (0 = n_head)", n_kv_head, n_head);
  MS_CHECK(ffn_hidden >= 0 && ffn_hidden <= 4 * 65536, "config: model.ffn_hidden={} must be in 0..262144 (0 = the "
           "mlp's default)", ffn_hidden);
  MS_CHECK(static_cast<int64_t>(fc_width()) * n_embd <= INT32_MAX, "config: the MLP is too large: {} x model.n_embd={} "
           "exceeds 2^31-1 elements", fc_width(), n_embd);
  MS_CHECK(max_seq_len > 0 && max_seq_len <= (1 << 20), "config: model.max_seq_len={} must be in 1..1048576",
           max_seq_len);
  MS_CHECK(static_cast<int64_t>(padded_vocab()) * n_embd <= INT32_MAX &&
               static_cast<int64_t>(max_seq_len) * n_embd <= INT32_MAX,
           "config: the embeddings are too large: the padded vocabulary {} or model.max_seq_len={} times "
           "model.n_embd={} exceeds 2^31-1 elements", padded_vocab(), max_seq_len, n_embd);
  MS_CHECK(std::isfinite(norm_eps) && norm_eps > 0 && norm_eps < 1, "config: model.norm_eps={} must be in (0, 1)",
           norm_eps);
  MS_CHECK(!rope() || head_size() % 2 == 0, "config: model.positions='rope' needs an even head size; n_embd={} / "
           "n_head={} = {}", n_embd, n_head, head_size());
  MS_CHECK(std::isfinite(rope_theta) && rope_theta > 1, "config: model.rope_theta={} must be finite and > 1",
           rope_theta);
  MS_CHECK(attention != AttentionKind::kSliding || window > 0,
           "config: model.window={} must be > 0 for sliding attention", window);
  MS_CHECK(full_every >= 0, "config: model.full_every={} must be >= 0", full_every);
  MS_CHECK(recompute_every >= 1 && recompute_every <= n_layer, "config: model.recompute_every={} must be in "
           "1..model.n_layer={}", recompute_every, n_layer);
  MS_CHECK(std::isfinite(init_std) && init_std > 0, "config: model.init_std={} must be finite and > 0", init_std);
}

void OptimConfig::validate() const {
  MS_CHECK(std::isfinite(lr) && lr > 0, "config: optim.lr={} must be finite and > 0", lr);
  MS_CHECK(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr,
           "config: optim.min_lr={} must be finite and in [0, optim.lr={}]", min_lr, lr);
  MS_CHECK(warmup_steps >= 0, "config: optim.warmup_steps={} must be >= 0", warmup_steps);
  MS_CHECK(decay_steps >= 0, "config: optim.decay_steps={} must be >= 0", decay_steps);
  MS_CHECK(std::isfinite(beta1) && beta1 >= 0 && beta1 < 1, "config: optim.beta1={} must be in [0,1)", beta1);
  MS_CHECK(std::isfinite(beta2) && beta2 >= 0 && beta2 < 1, "config: optim.beta2={} must be in [0,1)", beta2);
  MS_CHECK(std::isfinite(eps) && eps > 0, "config: optim.eps={} must be finite and > 0", eps);
  MS_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, "config: optim.weight_decay={} must be finite and >= 0", weight_decay);
  MS_CHECK(std::isfinite(max_trust) && max_trust >= 0, "config: optim.max_trust={} must be finite and >= 0", max_trust);
  MS_CHECK(std::isfinite(grad_clip) && grad_clip >= 0, "config: optim.grad_clip={} must be finite and >= 0", grad_clip);
}

void DataConfig::validate() const {
  MS_CHECK(!train.empty(), "config: data.train is missing (path, directory or glob of training shards)");
  MS_CHECK(std::isfinite(loader_timeout_s) && loader_timeout_s > 0 && loader_timeout_s <= 7 * 24 * 3600.0,
           "config: data.loader_timeout_s={} must be in (0, 604800] seconds", loader_timeout_s);
}

void TrainConfig::validate() const {
  MS_CHECK(steps > 0 && steps <= 1000000000, "config: train.steps={} must be in 1..1000000000", steps);
  MS_CHECK(batch_size > 0, "config: train.batch_size={} must be > 0", batch_size);
  MS_CHECK(grad_accum > 0, "config: train.grad_accum={} must be > 0", grad_accum);
  MS_CHECK(eval_every >= 0, "config: train.eval_every={} must be >= 0", eval_every);
  MS_CHECK(eval_batches > 0, "config: train.eval_batches={} must be > 0", eval_batches);
  MS_CHECK(sample_tokens >= 0, "config: train.sample_tokens={} must be >= 0", sample_tokens);
  MS_CHECK(!out_dir.empty(), "config: train.out_dir must not be empty");
  MS_CHECK(threads >= 0, "config: train.threads={} must be >= 0", threads);
  MS_CHECK(precision == DType::kF32 || precision == DType::kBF16,
           "config: train.precision='{}' must be {}", dtype_name(precision), config_choices<DType>());
  MS_CHECK(global_batch >= 0, "config: train.global_batch={} must be >= 0", global_batch);
  MS_CHECK(!resume.empty(), "config: train.resume must be 'auto', 'never' or a checkpoint folder");
  MS_CHECK(exit_after >= 0, "config: train.exit_after={} must be >= 0", exit_after);
  // Tokens per micro-batch stay well inside int.
  MS_CHECK(static_cast<int64_t>(batch_size) * seq_len <= (int64_t{1} << 30),
           "config: train.batch_size={} x train.seq_len={} tokens per micro-batch is too large", batch_size, seq_len);
}

void CheckpointConfig::validate() const {
  MS_CHECK(every >= 0, "config: checkpoint.every={} must be >= 0 (0 = no periodic saves)", every);
  MS_CHECK(keep_last >= 1, "config: checkpoint.keep_last={} must be >= 1 (the newest checkpoint is always kept)",
           keep_last);
  MS_CHECK(keep_every >= 0, "config: checkpoint.keep_every={} must be >= 0", keep_every);
  MS_CHECK(std::isfinite(timeout_s) && timeout_s > 0, "config: checkpoint.timeout_s={} must be > 0", timeout_s);
  MS_CHECK(memory_every >= -1, "config: checkpoint.memory_every={} must be >= -1 (-1 = auto, 0 = off)", memory_every);
  MS_CHECK(memory_replicas >= 0 && memory_replicas <= 8, "config: checkpoint.memory_replicas={} must be in 0..8",
           memory_replicas);
}

void ObsConfig::validate() const {
  MS_CHECK(flush_ms >= 10 && flush_ms <= 600000, "config: obs.flush_ms={} must be in 10..600000", flush_ms);
  MS_CHECK(summary_every >= 0, "config: obs.summary_every={} must be >= 0 (0 = never)", summary_every);
  MS_CHECK(std::isfinite(straggler_margin) && straggler_margin > 0 && straggler_margin < 10,
           "config: obs.straggler_margin={} must be in (0, 10) (a fraction: 0.05 = 5% slower than the peers' median)",
           straggler_margin);
  MS_CHECK(straggler_window >= 2, "config: obs.straggler_window={} must be >= 2 steps", straggler_window);
  MS_CHECK(realign_every >= 0, "config: obs.realign_every={} must be >= 0 (0 = only at start-up)", realign_every);
  MS_CHECK(std::isfinite(watchdog_grace_s) && watchdog_grace_s >= 0 && watchdog_grace_s <= 3600,
           "config: obs.watchdog_grace_s={} must be in 0..3600", watchdog_grace_s);
}

void ParallelConfig::validate() const {
  MS_CHECK(dp >= 0, "config: parallel.dp={} must be >= 0 (0 = all ranks)", dp);
  MS_CHECK(tp >= 1 && tp <= 4096, "config: parallel.tp={} must be in 1..4096", tp);
  MS_CHECK(tp_chunks >= 1, "config: parallel.tp_chunks={} must be >= 1", tp_chunks);
  MS_CHECK(pp >= 1 && pp <= 4096, "config: parallel.pp={} must be in 1..4096", pp);
  MS_CHECK(virtual_stages >= 1, "config: parallel.virtual_stages={} must be >= 1", virtual_stages);
  MS_CHECK(virtual_stages == 1 || schedule == PipelineScheduleKind::kInterleaved,
           "config: parallel.virtual_stages={} needs parallel.schedule='interleaved' (1f1b runs one chunk per stage)",
           virtual_stages);
  MS_CHECK(virtual_stages == 1 || pp > 1, "config: parallel.virtual_stages={} needs parallel.pp > 1",
           virtual_stages);
  MS_CHECK(std::isfinite(bucket_mb) && bucket_mb > 0, "config: parallel.bucket_mb={} must be > 0", bucket_mb);
  // Milliseconds must fit the deadline arithmetic (int64 ns): at most a week.
  MS_CHECK(std::isfinite(timeout_s) && timeout_s > 0 && timeout_s <= 7 * 24 * 3600.0,
           "config: parallel.timeout_s={} must be in (0, 604800] seconds", timeout_s);
  MS_CHECK(bucket_mb <= 65536.0f, "config: parallel.bucket_mb={} must be <= 65536", bucket_mb);
  MS_CHECK(static_cast<int64_t>(tp) * std::max(dp, 1) * pp <= 1 << 20,
           "config: parallel.tp={} x parallel.dp={} x parallel.pp={} ranks is too large", tp, dp, pp);
}

namespace {

// The tensor-parallel split must cut every sharded dimension (heads, MLP width, padded vocabulary,
// the sequence under sequence parallelism) evenly, and each chunk of a rank's rows must be non-empty.
void validate_tensor_split(const Config& c) {
  const auto& m = c.model;
  const auto& t = c.train;
  const auto& p = c.parallel;
  if (p.tp <= 1) return;
  MS_CHECK(m.n_head % p.tp == 0, "config: parallel.tp={} does not divide model.n_head={} (heads are split over the "
           "tensor-parallel ranks)", p.tp, m.n_head);
  MS_CHECK(m.kv_heads() % p.tp == 0, "config: parallel.tp={} does not divide the key/value heads model.n_kv_head={} "
           "(each tensor-parallel rank holds whole key/value heads; choose n_kv_head as a multiple of tp)", p.tp,
           m.kv_heads());
  MS_CHECK(m.ffn() % p.tp == 0, "config: parallel.tp={} does not divide the MLP width {} (model.ffn_hidden, 0 = the "
           "mlp's default)", p.tp, m.ffn());
  MS_CHECK(m.padded_vocab() % p.tp == 0, "config: parallel.tp={} does not divide the padded vocabulary {} "
           "(model.vocab_size={} rounded up to model.pad_vocab_to={}); choose pad_vocab_to as a multiple of tp",
           p.tp, m.padded_vocab(), m.vocab_size, m.pad_vocab_to);
  MS_CHECK(!p.sequence_parallel || t.seq_len % p.tp == 0, "config: parallel.tp={} does not divide train.seq_len={}, "
           "which sequence parallelism splits (or set parallel.sequence_parallel=false)", p.tp, t.seq_len);
  if (p.sequence_parallel)
    MS_CHECK(static_cast<int64_t>(p.tp_chunks) <= static_cast<int64_t>(t.batch_size) * t.seq_len / p.tp,
             "config: parallel.tp_chunks={} exceeds the {} rows each tensor-parallel rank holds (train.batch_size x "
             "train.seq_len / parallel.tp)", p.tp_chunks, static_cast<int64_t>(t.batch_size) * t.seq_len / p.tp);
}

}  // namespace

void Config::validate() const {
  model.validate();
  optim.validate();
  data.validate();
  train.validate();
  checkpoint.validate();
  obs.validate();
  parallel.validate();

  const auto& m = model;
  const auto& t = train;
  const auto& p = parallel;
  MS_CHECK(t.seq_len > 0 && t.seq_len <= m.max_seq_len,
           "config: train.seq_len={} must be in 1..model.max_seq_len={}", t.seq_len, m.max_seq_len);
  validate_tensor_split(*this);
  MS_CHECK(m.n_layer % (p.pp * p.virtual_stages) == 0,
           "config: model.n_layer={} is not divisible by parallel.pp={} x parallel.virtual_stages={} (the pipeline's "
           "model chunks hold equal numbers of layers)", m.n_layer, p.pp, p.virtual_stages);
  if (p.schedule == PipelineScheduleKind::kInterleaved && t.global_batch == 0)
    MS_CHECK(t.grad_accum % p.pp == 0, "config: train.grad_accum={} (the micro-batches of a step) is not a multiple "
             "of parallel.pp={}, which the interleaved schedule needs", t.grad_accum, p.pp);
  // Sequences per step stay well inside int.
  MS_CHECK(static_cast<int64_t>(t.batch_size) * t.grad_accum * std::max(p.dp, 1) <= INT32_MAX,
           "config: train.batch_size={} x train.grad_accum={} x parallel.dp={} sequences per step is too large",
           t.batch_size, t.grad_accum, p.dp);
  MS_CHECK(p.backend != BackendChoice::kNccl || t.device == Device::kCuda,
           "config: parallel.backend='nccl' moves GPU memory: it needs train.device='cuda' (gloo or mpi for 'cpu')");
  // NCCL needs a rank's sends and receives that must progress at once fused in one group call
  // (ncclGroupStart/End); the pipeline posts them one by one, concurrently: not on NCCL yet.
  MS_CHECK(p.backend != BackendChoice::kNccl || p.pp <= 1,
           "config: parallel.backend='nccl' with parallel.pp={}: the pipeline's concurrent sends and receives "
           "would need grouped NCCL calls, which are not built yet; use parallel.backend='gloo' or 'mpi' (GPU "
           "buffers through pinned host staging)", p.pp);
  if (p.dp > 0 && t.global_batch > 0)
    MS_CHECK(t.global_batch % (p.dp * t.batch_size) == 0,
             "config: train.global_batch={} is not divisible by parallel.dp={} x train.batch_size={}",
             t.global_batch, p.dp, t.batch_size);
}

}  // namespace ms
