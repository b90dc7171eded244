// trainer.cpp: see trainer.h.
#include "trainer.h"

#include <omp.h>  // omp_set_num_threads, omp_get_num_procs

#include <algorithm>  // std::partial_sort, std::min
#include <chrono>     // std::chrono::steady_clock
#include <cmath>      // std::isfinite, std::exp
#include <cstdio>     // std::fprintf
#include <filesystem>
#include <fstream>

#include <fmt/format.h>  // fmt::format

#include "atomic_file.h" // write_file_atomic
#include "check.h"       // MS_CHECK
#include "dataloader.h"  // DataLoader
#include "grad_norm.h"   // grad_sq_sum, clip_scale, scale_inplace
#include "hf_export.h"   // export_hf
#include "gemm_bf16.h"   // measure_bf16_gemm_peak_gflops
#include "matmul.h"      // measure_sgemm_peak_gflops
#include "rng.h"         // Rng
#include "run_log.h"     // RunLog
#include "thread_pin.h"  // pin_omp_threads
#include "tokenizer.h"   // Gpt2Tokenizer
#include "comm.h"        // Communicator, init_world, CommEnv
#include "rank_grid.h"   // RankGrid
#include "timeline.h"    // Timeline, TimelineScope
#include "zero_dp.h"     // ZeroDataParallel

namespace ms {

Trainer::Trainer(const Config& cfg, Communicator* dp, Timeline* timeline)
    : cfg_(cfg),
      model_(cfg.model, cfg.train.batch_size, cfg.train.seq_len, parse_precision(cfg.train.precision)),
      schedule_{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps,
                cfg.optim.decay_steps > 0 ? cfg.optim.decay_steps : cfg.train.steps},
      timeline_(timeline) {
  model_.init_weights(static_cast<uint64_t>(cfg.train.seed));
  if (dp && dp->size() > 1) {
    dp_size_ = dp->size();
    zero_ = std::make_unique<ZeroDataParallel>(model_, *dp, cfg, timeline);
  } else {
    optimizer_ = std::make_unique<Optimizer>(
        cfg.optim, model_.param_tensors(cfg.optim.decay_embeddings, cfg.optim.decay_norm_and_bias),
        model_.num_params());
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

StepStats Trainer::train_step(const std::function<void(int*, int*)>& next_micro_batch) {
  auto t0 = std::chrono::steady_clock::now();
  const int B = cfg_.train.batch_size, T = cfg_.train.seq_len, A = cfg_.train.grad_accum;
  const int N = B * T;
  if (zero_) zero_->reset_exposed_seconds();
  if (!grads_zeroed_) model_.zero_grad();  // the single-process optimizer clears them in its pass
  grads_zeroed_ = false;
  double loss_sum = 0;
  for (int a = 0; a < A; a++) {
    {
      TimelineScope span(timeline_, "data");
      next_micro_batch(inputs_.data(), targets_.data());
    }
    // Every row counts equally in the step: dloss = 1 / (rows with a target in the whole step,
    // over all data-parallel ranks). Rows are never ignored by the loaders, so that is N * A * dp.
    const float dloss = 1.0f / (static_cast<float>(N) * A * dp_size_);
    {
      TimelineScope span(timeline_, "forward");
      loss_sum += model_.forward(inputs_.data(), targets_.data(), B, T, dloss);
    }
    if (zero_) zero_->arm_backward(a == A - 1);
    TimelineScope span(timeline_, "backward");
    model_.backward();
  }
  StepStats s;
  s.step = steps_taken() + 1;
  double norm;
  if (zero_) {
    zero_->finish_grad_reduce_scatter();
    s.loss = static_cast<float>(zero_->sum_across_ranks(loss_sum) / (static_cast<double>(A) * dp_size_));
    norm = std::sqrt(zero_->grad_sq_sum());
  } else {
    s.loss = static_cast<float>(loss_sum / A);
    norm = std::sqrt(grad_sq_sum(model_.grads(), model_.num_params()));
  }
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
    TimelineScope span(timeline_, "optimizer");
    // Non-const params() marks the bf16 weight copy stale: the next forward converts it once,
    // unless the optimizer wrote it in its own pass (AdamW fuses the clipping scale and the copy).
    float* params = model_.params();
    if (optimizer_->step(params, model_.grads(), s.lr, scale, model_.bf16_weight_copy(),
                         /*zero_grads=*/true))
      model_.mark_bf16_weights_fresh();
    grads_zeroed_ = true;
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

float Trainer::eval_loss(DataLoader& val, int batches) {
  const int B = cfg_.train.batch_size, T = cfg_.train.seq_len;
  val.set_position({0, 0});
  double sum = 0;
  for (int i = 0; i < batches; i++) {
    val.next_batch(inputs_.data(), targets_.data());
    sum += model_.forward(inputs_.data(), targets_.data(), B, T);
  }
  return static_cast<float>(sum / batches);
}

std::string Trainer::sample(const Gpt2Tokenizer& tok, int ntokens, uint64_t seed) {
  const int T = cfg_.train.seq_len, V = cfg_.model.vocab_size, Vp = cfg_.model.padded_vocab();
  const int topk = 40;
  Rng rng(seed, /*stream=*/0x5a4d);
  std::vector<int> ctx = {tok.eot()}, out;
  std::vector<std::pair<float, int>> cand(V);
  for (int i = 0; i < ntokens; i++) {
    int start = std::max(0, static_cast<int>(ctx.size()) - T);
    int len = static_cast<int>(ctx.size()) - start;
    model_.forward(ctx.data() + start, nullptr, 1, len);
    const float* logits = model_.logits() + static_cast<size_t>(len - 1) * Vp;
    for (int v = 0; v < V; v++) cand[v] = {logits[v], v};
    std::partial_sort(cand.begin(), cand.begin() + topk, cand.end(), std::greater<>());
    double z = 0;
    for (int k = 0; k < topk; k++) z += std::exp(cand[k].first - cand[0].first);
    double u = rng.uniform() * z, acc = 0;
    int next = cand[topk - 1].second;
    for (int k = 0; k < topk; k++) {
      acc += std::exp(cand[k].first - cand[0].first);
      if (u < acc) { next = cand[k].second; break; }
    }
    if (next == tok.eot()) break;
    ctx.push_back(next);
    out.push_back(next);
  }
  return tok.decode(out);
}

float run_training(const Config& cfg_in) {
  namespace fs = std::filesystem;
  // The world first: layout errors (world size vs grid, global batch vs dp) before any work.
  Config cfg = cfg_in;
  CommEnv env = CommEnv::from_environment();
  if (cfg.parallel.backend != "auto" && env.world_size > 1) env.backend = cfg.parallel.backend;
  env.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.timeout_s * 1000.0));
  cfg.resolve_layout(env.world_size);
  cfg.validate();
  std::unique_ptr<RankGrid> grid;
  if (env.world_size > 1)
    grid = std::make_unique<RankGrid>(init_world(env), cfg.parallel.order,
                                      GridShape{cfg.parallel.tp, cfg.parallel.dp, cfg.parallel.pp});
  const int rank = grid ? grid->world().rank() : 0;
  const int dp = cfg.parallel.dp, dp_rank = grid ? grid->coord().dp : 0;
  Timeline timeline;
  timeline.enable(cfg.parallel.trace);

  const int threads = cfg.train.threads > 0 ? cfg.train.threads
                                            : std::max(1, omp_get_num_procs() / std::max(1, env.local_world_size));
  omp_set_num_threads(threads);
  const std::string out_dir = cfg.train.out_dir;
  if (rank == 0) {
    fs::create_directories(out_dir);
    const std::string text = to_toml(cfg);
    write_file_atomic(out_dir + "/config.resolved.toml", {{text.data(), text.size()}});
  }
  RunLog log(out_dir, rank == 0 ? cfg.train.progress : "none");
  const int B = cfg.train.batch_size, T = cfg.train.seq_len;

  // Data first: every shard is validated before any compute.
  DataLoader train(std::vector<std::string>{cfg.data.train}, B, T, cfg.model.vocab_size,
                   static_cast<uint64_t>(cfg.train.seed), cfg.data.shuffle, "data.train");
  if (dp > 1) train.set_shard(dp_rank, dp);
  std::unique_ptr<DataLoader> val;
  if (!cfg.data.val.empty())
    val = std::make_unique<DataLoader>(std::vector<std::string>{cfg.data.val}, B, T, cfg.model.vocab_size,
                                       static_cast<uint64_t>(cfg.train.seed), false, "data.val");
  const int eval_batches = val ? static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(cfg.train.eval_batches, val->num_samples() / B)))
                               : 0;

  Trainer trainer(cfg, grid ? &grid->dp() : nullptr, &timeline);
  GPT& model = trainer.model();
  // Pinned after the loaders' prefetch threads exist (they keep the process's CPU set).
  if (cfg.train.pin_threads) log.message("threads", pin_omp_threads(env.local_rank));
  if (grid)
    log.message("parallel", fmt::format(
        "world {} ({} backend), grid {} tp={} dp={} pp={}; ZeRO-2: {} buckets of <= {} MiB, optimizer state {:.1f} MiB per rank, overlap {}",
        env.world_size, grid->world().backend(), cfg.parallel.order, cfg.parallel.tp, dp, cfg.parallel.pp,
        trainer.data_parallel() ? trainer.data_parallel()->layout().buckets().size() : 0, cfg.parallel.bucket_mb,
        trainer.data_parallel() ? trainer.data_parallel()->state_bytes() / 1048576.0 : 0.0,
        cfg.parallel.overlap ? "on" : "off"));
  // MFU denominator: the GEMM throughput this machine reaches in the run's precision. Only rank 0
  // logs, so only rank 0 measures (the others would slow its probe down on shared cores).
  const bool bf16 = model.precision() == Precision::kBf16;
  const double peak = rank != 0 ? 1.0 : bf16 ? measure_bf16_gemm_peak_gflops() : measure_sgemm_peak_gflops();
  const double flops_tok = model.flops_per_token(T);
  log.message("start", fmt::format(
      "megascale: {} parameters (L={} C={} NH={} V={} Vp={}), block={}, attention={}{}, optimizer={}, "
      "B={} T={} grad_accum={} dp={} -> {} tokens/step, {} threads, precision={}",
      model.num_params(), cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head, cfg.model.vocab_size,
      cfg.model.padded_vocab(), cfg.model.block, cfg.model.attention,
      cfg.model.attention == "sliding" ? fmt::format("(W={}, full_every={})", cfg.model.window, cfg.model.full_every) : "",
      cfg.optim.name, B, T, cfg.train.grad_accum, dp, B * T * cfg.train.grad_accum * dp, threads, cfg.train.precision));
  log.message("data", fmt::format("train: {} samples of {} tokens{}", train.num_samples(), T + 1,
                                  val ? fmt::format("; val: {} samples, {} batches per evaluation", val->num_samples(), eval_batches) : ""));
  log.message("peak", fmt::format("measured {} GEMM peak: {:.1f} GFLOP/s (MFU denominator); model: {:.3f} GFLOP per token",
                                  bf16 ? "bf16" : "fp32", peak, flops_tok / 1e9));

  auto next = [&](int* in, int* tg) { train.next_batch(in, tg); };
  float last = 0;
  for (int step = 1; step <= cfg.train.steps; step++) {
    StepStats s;
    try {
      s = trainer.train_step(next);
    } catch (const CommError&) {
      // Hang analysis: this rank's last collectives (op, group, seq, peer, times, outcome).
      const std::string path = fmt::format("{}/comm_trace_rank{}.json", out_dir, rank);
      try {
        fs::create_directories(out_dir);
        write_comm_trace(path);
        std::fprintf(stderr, "megascale: rank %d: communication trace written to %s\n", rank, path.c_str());
      } catch (const std::exception&) {
      }
      throw;
    }
    StepRecord r;
    r.step = s.step; r.total_steps = cfg.train.steps;
    r.loss = s.loss; r.lr = s.lr; r.grad_norm = s.grad_norm; r.step_seconds = s.seconds;
    r.tokens_per_s = static_cast<double>(B) * T * cfg.train.grad_accum * dp / s.seconds;
    r.mfu = r.tokens_per_s * flops_tok / (peak * 1e9 * dp);  // per-rank peak x ranks
    if (trainer.data_parallel()) r.comm_exposed_ms = s.comm_exposed_seconds * 1e3;
    log.step(r);
    last = s.loss;
    bool eval_now = val && ((cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0) || step == cfg.train.steps);
    if (eval_now) {
      last = trainer.eval_loss(*val, eval_batches);
      log.eval(step, last);
    }
  }
  trainer.sync_params();
  if (cfg.parallel.trace) {
    fs::create_directories(out_dir);
    const std::string path = fmt::format("{}/trace_rank{}.json", out_dir, rank);
    timeline.write_chrome(path, rank);
    log.message("trace", "wrote " + path + " (Chrome trace / Perfetto; one per rank)");
  }
  if (rank != 0) return last;
  const std::string model_dir = out_dir + "/model";
  export_hf(model, model_dir);
  log.message("export", fmt::format("saved {} (Hugging Face GPT-2 safetensors + config.json)", model_dir));
  if (cfg.train.sample_tokens > 0) {
    Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(cfg.data.tokenizer_dir);  // empty: the installed one
    std::string text = trainer.sample(tok, cfg.train.sample_tokens, static_cast<uint64_t>(cfg.train.seed));
    log.message("sample", "sample:\n---\n" + text + "\n---");
  }
  return last;
}

}  // namespace ms
