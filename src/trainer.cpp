// trainer.cpp: see trainer.h.
#include "trainer.h"

#include <omp.h>  // omp_set_num_threads, omp_get_num_procs

#include <algorithm>  // std::partial_sort, std::min
#include <chrono>     // std::chrono::steady_clock
#include <cmath>      // std::isfinite, std::exp
#include <filesystem>
#include <fstream>

#include <fmt/format.h>  // fmt::format

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

namespace ms {

Trainer::Trainer(const Config& cfg)
    : cfg_(cfg),
      model_(cfg.model, cfg.train.batch_size, cfg.train.seq_len, parse_precision(cfg.train.precision)),
      optimizer_(cfg.optim, model_.param_tensors(cfg.optim.decay_embeddings, cfg.optim.decay_norm_and_bias),
                 model_.num_params()),
      schedule_{cfg.optim.lr, cfg.optim.min_lr, cfg.optim.warmup_steps,
                cfg.optim.decay_steps > 0 ? cfg.optim.decay_steps : cfg.train.steps} {
  model_.init_weights(static_cast<uint64_t>(cfg.train.seed));
  const size_t N = static_cast<size_t>(cfg.train.batch_size) * cfg.train.seq_len;
  inputs_.resize(N);
  targets_.resize(N);
}

StepStats Trainer::train_step(const std::function<void(int*, int*)>& next_micro_batch) {
  auto t0 = std::chrono::steady_clock::now();
  const int B = cfg_.train.batch_size, T = cfg_.train.seq_len, A = cfg_.train.grad_accum;
  const int N = B * T;
  model_.zero_grad();
  double loss_sum = 0;
  for (int a = 0; a < A; a++) {
    next_micro_batch(inputs_.data(), targets_.data());
    // Every row counts equally in the step: dloss = 1 / (rows with a target in the whole step).
    // Rows are never ignored by the loaders, so that is N * A.
    loss_sum += model_.forward(inputs_.data(), targets_.data(), B, T, 1.0f / (static_cast<float>(N) * A));
    model_.backward();
  }
  StepStats s;
  s.step = optimizer_.steps_taken() + 1;
  s.loss = static_cast<float>(loss_sum / A);
  double norm = std::sqrt(grad_sq_sum(model_.grads(), model_.num_params()));
  s.grad_norm = static_cast<float>(norm);
  MS_CHECK(std::isfinite(norm) && std::isfinite(s.loss),
           "step {}: loss {} / gradient norm {} is not finite; stopping before the update (nothing is exported)",
           s.step, s.loss, norm);
  float scale = clip_scale(norm, cfg_.optim.grad_clip);
  if (scale < 1.0f) scale_inplace(model_.grads(), model_.num_params(), scale);
  s.lr = schedule_.at(s.step - 1);
  // Non-const params() marks the bf16 weight copy stale: the next forward converts it once.
  optimizer_.step(model_.params(), model_.grads(), s.lr);
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

float run_training(const Config& cfg) {
  namespace fs = std::filesystem;
  const int threads = cfg.train.threads > 0 ? cfg.train.threads : omp_get_num_procs();
  omp_set_num_threads(threads);
  const std::string out_dir = cfg.train.out_dir;
  fs::create_directories(out_dir);
  {
    std::ofstream f(out_dir + "/config.resolved.toml");
    f << to_toml(cfg);
    MS_SYSCHECK(f.good(), "{}/config.resolved.toml: cannot write", out_dir);
  }
  RunLog log(out_dir, cfg.train.progress);
  const int B = cfg.train.batch_size, T = cfg.train.seq_len;

  // Data first: every shard is validated before any compute.
  DataLoader train(std::vector<std::string>{cfg.data.train}, B, T, cfg.model.vocab_size,
                   static_cast<uint64_t>(cfg.train.seed), cfg.data.shuffle, "data.train");
  std::unique_ptr<DataLoader> val;
  if (!cfg.data.val.empty())
    val = std::make_unique<DataLoader>(std::vector<std::string>{cfg.data.val}, B, T, cfg.model.vocab_size,
                                       static_cast<uint64_t>(cfg.train.seed), false, "data.val");
  const int eval_batches = val ? static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(cfg.train.eval_batches, val->num_samples() / B)))
                               : 0;

  Trainer trainer(cfg);
  GPT& model = trainer.model();
  // Pinned after the loaders' prefetch threads exist (they keep the process's CPU set).
  if (cfg.train.pin_threads) log.message("threads", pin_omp_threads());
  // MFU denominator: the GEMM throughput this machine reaches in the run's precision.
  const bool bf16 = model.precision() == Precision::kBf16;
  const double peak = bf16 ? measure_bf16_gemm_peak_gflops() : measure_sgemm_peak_gflops();
  const double flops_tok = model.flops_per_token(T);
  log.message("start", fmt::format(
      "megascale: {} parameters (L={} C={} NH={} V={} Vp={}), block={}, attention={}{}, optimizer={}, "
      "B={} T={} grad_accum={} -> {} tokens/step, {} threads, precision={}",
      model.num_params(), cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head, cfg.model.vocab_size,
      cfg.model.padded_vocab(), cfg.model.block, cfg.model.attention,
      cfg.model.attention == "sliding" ? fmt::format("(W={}, full_every={})", cfg.model.window, cfg.model.full_every) : "",
      cfg.optim.name, B, T, cfg.train.grad_accum, B * T * cfg.train.grad_accum, threads, cfg.train.precision));
  log.message("data", fmt::format("train: {} samples of {} tokens{}", train.num_samples(), T + 1,
                                  val ? fmt::format("; val: {} samples, {} batches per evaluation", val->num_samples(), eval_batches) : ""));
  log.message("peak", fmt::format("measured {} GEMM peak: {:.1f} GFLOP/s (MFU denominator); model: {:.3f} GFLOP per token",
                                  bf16 ? "bf16" : "fp32", peak, flops_tok / 1e9));

  auto next = [&](int* in, int* tg) { train.next_batch(in, tg); };
  float last = 0;
  for (int step = 1; step <= cfg.train.steps; step++) {
    StepStats s = trainer.train_step(next);
    StepRecord r;
    r.step = s.step; r.total_steps = cfg.train.steps;
    r.loss = s.loss; r.lr = s.lr; r.grad_norm = s.grad_norm; r.step_seconds = s.seconds;
    r.tokens_per_s = static_cast<double>(B) * T * cfg.train.grad_accum / s.seconds;
    r.mfu = r.tokens_per_s * flops_tok / (peak * 1e9);
    log.step(r);
    last = s.loss;
    bool eval_now = val && ((cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0) || step == cfg.train.steps);
    if (eval_now) {
      last = trainer.eval_loss(*val, eval_batches);
      log.eval(step, last);
    }
  }
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
