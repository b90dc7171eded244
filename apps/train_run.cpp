// train_run.cpp: see train_run.h.
#include "train_run.h"

#include <omp.h>  // omp_set_num_threads, omp_get_num_procs

#include <pthread.h>  // pthread_sigmask
#include <signal.h>   // sigwait, SIGTERM, SIGINT, SIGXFSZ

#include <algorithm>  // std::max, std::min
#include <atomic>
#include <chrono>
#include <cmath>  // NAN
#include <filesystem>
#include <memory>
#include <thread>

#include <fmt/format.h>  // fmt::format
#include <nlohmann/json.hpp>  // restore_rank<R>.json

#include "base/atomic_file.h"     // write_file_atomic
#include "base/check.h"           // MS_CHECK
#include "base/log.h"             // logger
#include "base/thread_pin.h"      // pin_omp_threads
#include "ckpt/checkpointer.h"    // Checkpointer
#include "ckpt/ckpt_comm.h"       // any_rank
#include "ckpt/dir_lock.h"        // lock_run_dirs
#include "ckpt/restore.h"         // restore_checkpoint
#include "ckpt/storage.h"         // LocalStorage
#include "comm/comm_env.h"        // CommEnv
#include "comm/rank_grid.h"       // RankGrid
#include "comm/world.h"           // init_world
#include "data/dataloader.h"      // DataLoader
#include "data/shared_batches.h"  // MachineBatchFeed
#include "data/tokenizer.h"       // Gpt2Tokenizer
#include "app_paths.h"            // tokenizer_dir_or_default
#include "hang_watch.h"           // HangWatch
#include "ckpt/ckpt_fault.h"         // check_ckpt_fault_env
#include "launch_report.h"        // write_launch_report
#include "kernels/gemm_peak.h"    // measure_sgemm_peak_gflops, measure_bf16_gemm_peak_gflops
#include "kernels/hw_peak.h"      // hardware_peak
#include "model/flops.h"          // model_flops_per_token
#include "model/hf_export.h"      // export_hf
#include "obs/timeline.h"         // write_chrome_trace, write_comm_trace
#include "obs/trace_sink.h"       // TraceSink
#include "train/evaluation.h"     // eval_loss
#include "obs/run_recorder.h"     // record_event
#include "train/run_log.h"        // RunLog
#include "train/run_observer.h"   // RunObserver
#include "train/sampling.h"       // sample_text
#include "train/trainer.h"        // Trainer

namespace ms {

namespace {
// SIGUSR1 (the driver stopping the ranks for a recovery): a hang dump and exit without saving.
// SIGTERM / SIGINT / SIGHUP (preemption, Ctrl-C, a closed terminal): noted here, acted on at the
// next step boundary, where
// every rank agrees, saves a checkpoint and ends with exit code 0. The signals are blocked in every
// thread of the run and taken by one thread in sigwait: a handler running on a compute thread
// could land in oneDNN's JIT kernels, which may keep data below the stack pointer.
std::atomic<int> g_stop_signal{0};

void install_stop_handlers() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by every thread created from here on
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      HangWatch::on_signal(sig);  // hang localization: a dump of where this rank is (hang_watch.h)
      // SIGUSR1: the driver's recovery stop (launch/driver.h): the dump above, then out at once,
      // without a save (the state may be what failed). The records written so far stay.
      if (sig == SIGUSR1) {
        MachineBatchFeed::unlink_attaching();  // _Exit skips the feed's cleanup (its attach window)
        flush_active_recorder();
        std::fprintf(stderr, "megascale: stopped by the driver (SIGUSR1) for a recovery\n");
        std::_Exit(128 + SIGUSR1);
      }
      g_stop_signal.store(sig);
    }
  }).detach();
  // A file-size limit (RLIMIT_FSIZE) makes a checkpoint write fail with EFBIG, reported as a
  // failed save, instead of killing the process.
  signal(SIGXFSZ, SIG_IGN);
}

// The checkpoint writer's finished saves: rank 0 logs whole saves (every rank logs its own
// failures as they happen). Returns true if one failed.
bool report_saves(Checkpointer& ckpt, RunLog& log) {
  bool failed = false;
  for (const SaveOutcome& o : ckpt.take_outcomes()) {
    if (o.whole) log.message("checkpoint", fmt::format("step {}: {} (stage 2: {:.2f} s)", o.step, o.message, o.seconds));
    record_event(o.ok ? "checkpoint saved" : "checkpoint failed", fmt::format("step {}: {}", o.step, o.message));
    failed = failed || !o.ok;
  }
  return failed;
}
}  // namespace

float run_training(const Config& cfg_in) {
  namespace fs = std::filesystem;
  // The world first: layout errors (world size vs grid, global batch vs dp) before any work.
  Config cfg = cfg_in;
  install_stop_handlers();  // before any thread exists
  check_ckpt_fault_env();   // a malformed MEGASCALE_CKPT_FAULT is an error here, not on the copier thread
  CommEnv env = CommEnv::from_environment();
  cfg.resolve_layout(env.world_size);  // validates every value first, before any arithmetic on them
  if (cfg.parallel.backend != BackendChoice::kAuto && env.world_size > 1) env.backend = config_name(cfg.parallel.backend);
  env.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.timeout_s * 1000.0));
  HangWatch hang_watch(cfg, env);  // obs.watchdog: before the world, so its creation is watched too
  std::unique_ptr<RankGrid> grid;
  if (env.world_size > 1)
    grid = std::make_unique<RankGrid>(init_world(env), cfg.parallel.order,
                                      GridShape{cfg.parallel.tp, cfg.parallel.dp, cfg.parallel.pp});
  if (grid) hang_watch.attach(*grid, env, cfg);
  const int rank = grid ? grid->world().rank() : 0;
  // One job per run folder: rank 0 locks train.out_dir and the checkpoint folder for the run's
  // lifetime; a second job stops here, on every rank, before it writes anything (ckpt/dir_lock.h).
  const auto dir_locks = lock_run_dirs(cfg, grid ? &grid->world() : nullptr, rank);
  const int dp = cfg.parallel.dp, dp_rank = grid ? grid->coord().dp : 0;
  RunObserver observer(cfg, grid.get());  // records, aligned clocks, segment summary (a collective)

  const int threads = cfg.train.threads > 0 ? cfg.train.threads
                                            : std::max(1, omp_get_num_procs() / std::max(1, env.local_world_size));
  omp_set_num_threads(threads);
  const std::string out_dir = cfg.train.out_dir;
  if (rank == 0) {
    fs::create_directories(out_dir);
    const std::string text = to_toml(cfg);
    write_text_atomic(out_dir + "/config.resolved.toml", text);
  }
  write_launch_report(cfg, rank, env.world_size);  // run.json for `megascale launch`'s dashboard
  RunLog log(out_dir, cfg.train.progress, /*silent=*/rank != 0);
  const int B = cfg.train.batch_size, T = cfg.train.seq_len;

  // Data first: one loader per machine (local rank 0 validates the shards and prepares every
  // micro-batch into shared memory); the ranks that use tokens (pipeline stages with the first or
  // the last chunk) read their data-parallel slice from it.
  const int stage = grid ? grid->coord().pp : 0;
  MachineFeedOptions feed_opt;
  feed_opt.paths = {cfg.data.train};
  feed_opt.B = B, feed_opt.T = T, feed_opt.vocab_size = cfg.model.vocab_size;
  feed_opt.seed = static_cast<uint64_t>(cfg.train.seed), feed_opt.shuffle = cfg.data.shuffle;
  feed_opt.name = "data.train";
  feed_opt.dp = dp, feed_opt.dp_rank = dp_rank;
  feed_opt.needs_tokens = stage == 0 || stage == cfg.parallel.pp - 1;
  feed_opt.local_rank = env.local_rank, feed_opt.local_world_size = env.local_world_size;
  // Several emulated hosts on one machine (the driver's executors) each have their own loader.
  feed_opt.job_key = env.run_id + "|" + env.store + "|" + fs::absolute(out_dir).string() + "|" +
                     (env.host_index >= 0 ? std::to_string(env.host_index) : "");
  feed_opt.timeout_s = cfg.data.loader_timeout_s;
  // Validation: opened (and validated) only by the ranks that use tokens; the pipeline's middle
  // stages learn the number of evaluation batches from stage 0.
  std::unique_ptr<DataLoader> val;
  const bool validate = !cfg.data.val.empty();
  if (validate && feed_opt.needs_tokens)
    val = std::make_unique<DataLoader>(std::vector<std::string>{cfg.data.val}, B, T, cfg.model.vocab_size,
                                       static_cast<uint64_t>(cfg.train.seed), false, "data.val");
  const uint64_t val_samples = val ? val->num_samples() : 0;
  int eval_batches = val ? static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(cfg.train.eval_batches, val_samples / B)))
                         : 0;
  if (validate && cfg.parallel.pp > 1) {
    float n = static_cast<float>(eval_batches);  // exact: at most train.eval_batches
    grid->pp().broadcast(&n, 1, DType::kF32, 0);
    eval_batches = static_cast<int>(n);
  }

  // A resume in sight (train.resume given as a folder, or `auto` with a checkpoint to try; rank 0
  // looks, everyone follows): the weights' random init is skipped, the restore sets every weight;
  // if no checkpoint verifies after all, the init runs then (the same weights as a fresh start).
  const std::string ckpt_root = cfg.checkpoint.dir.empty() ? out_dir + "/checkpoints" : cfg.checkpoint.dir;
  LocalStorage storage(ckpt_root);
  Communicator* world = grid ? &grid->world() : nullptr;
  bool resume_in_sight = false;
  if (rank == 0 && cfg.train.resume != "never")
    resume_in_sight = cfg.train.resume != "auto" || !checkpoint_candidates(storage, [](const std::string&) {}).empty();
  resume_in_sight = any_rank(world, resume_in_sight);
  Trainer trainer(cfg, grid ? &grid->dp() : nullptr, grid ? &grid->tp() : nullptr, grid ? &grid->pp() : nullptr,
                  grid ? grid->embedding() : nullptr, /*init_weights=*/!resume_in_sight);
  MS_CHECK(trainer.parallel().needs_tokens() == feed_opt.needs_tokens, "rank {}: the data feed and the pipeline disagree on "
           "whether this stage reads tokens", rank);
  GPT& model = trainer.model();

  // Resume (train.resume): the newest checkpoint that verifies, loaded under this layout; the
  // training stream continues where it stopped.
  const CheckpointRank who{rank, env.world_size, dp_rank, grid ? grid->coord().tp : 0, stage};
  const RestoreResult restored = restore_checkpoint(
      cfg, trainer.parallel(), storage, world, grid ? &grid->dp() : nullptr, who,
      [&](const std::string& m) { if (rank == 0) log.message("checkpoint", m); });
  int first_step = 1;
  if (!restored.restored && resume_in_sight) trainer.parallel().init_weights_now();
  if (restored.restored) {
    first_step = restored.manifest.step + 1;
    feed_opt.start = restored.manifest.data;
    log.message("resume", fmt::format("resumed from {} (step {}, {} tokens, data at epoch {} sample {}); rank 0 read "
                                      "{} files ({:.1f} MiB) in {:.2f} s", restored.path, restored.manifest.step,
                                      restored.manifest.tokens, restored.manifest.data.epoch,
                                      restored.manifest.data.index, restored.files_read,
                                      restored.bytes_read / 1048576.0, restored.seconds));
    // Every rank's reads, for the recovery-read accounting (one reader per data-parallel group).
    nlohmann::json reads = {{"checkpoint", restored.path}, {"step", restored.manifest.step},
                            {"files_read", restored.files_read}, {"bytes_read", restored.bytes_read},
                            {"files", restored.files}, {"seconds", restored.seconds},
                            {"read_seconds", restored.read_seconds}, {"agree_seconds", restored.agree_seconds},
                            {"send_seconds", restored.send_seconds},
                            {"dp", dp_rank}, {"tp", who.tp}, {"pp", stage}};
    write_text_atomic(fmt::format("{}/restore_rank{}.json", out_dir, rank), reads.dump(1));
  }
  MachineBatchFeed train(feed_opt);
  // Pinned after the loaders' prefetch threads exist (they keep the process's CPU set).
  // Oversubscribed (more threads on this machine than usable cores): not pinned, so the scheduler
  // shares the cores among all ranks evenly (pinned, the ranks sharing a core with rank 0's extra
  // work run ~30% slower than the others, a false straggler).
  if (cfg.train.pin_threads && env.local_world_size * threads <= omp_get_num_procs())
    log.message("threads", pin_omp_threads(env.local_rank));
  else if (cfg.train.pin_threads)
    log.message("threads", fmt::format("threads not pinned: {} rank(s) x {} thread(s) on this machine exceed its {} "
                                       "usable core(s)", env.local_world_size, threads, omp_get_num_procs()));
  Checkpointer ckpt(cfg, trainer.parallel(), storage, world, who, restored.restored ? &restored.manifest : nullptr);
  double stage1_wait_s = 0;  // the optimizer's wait for a stage-1 copy, this step
  trainer.set_before_update([&] { stage1_wait_s = ckpt.finish_stage1(); });
  if (grid)
    log.message("parallel", fmt::format("world {} ({} backend), grid {} tp={} dp={} pp={}{}", env.world_size,
                                        grid->world().backend(), cfg.parallel.order, cfg.parallel.tp, dp,
                                        cfg.parallel.pp, trainer.parallel().describe()));
  // MFU as MegaScale counts it: model FLOP/s over the hardware peak of every rank (cores x FLOP/cycle x
  // measured clock in the run's precision, kernels/hw_peak.h); beside it, the ratio to the GEMM
  // throughput this machine reaches (kernels/gemm_peak.h). Only rank 0 logs, so only rank 0 measures
  // (the others would slow its probes down on shared cores); elsewhere both stay NaN.
  const DType precision = model.precision();
  const bool bf16 = precision == DType::kBF16;
  HardwarePeak hw;
  double hw_gflops = NAN, gemm_gflops = NAN;
  if (rank == 0) {
    hw = hardware_peak(threads);
    hw_gflops = hw.gflops(precision);
    gemm_gflops = bf16 ? measure_bf16_gemm_peak_gflops() : measure_sgemm_peak_gflops();
  }
  const double job_ranks = static_cast<double>(dp) * cfg.parallel.tp * cfg.parallel.pp;
  const double flops_tok = model_flops_per_token(cfg.model, T);
  log.message("start", fmt::format(
      "megascale: {} parameters (L={} C={} NH={} V={} Vp={}), block={}, attention={}{}, optimizer={}, "
      "B={} T={} grad_accum={} dp={} -> {} tokens/step, {} threads, precision={}",
      model.num_params(), cfg.model.n_layer, cfg.model.n_embd, cfg.model.n_head, cfg.model.vocab_size,
      cfg.model.padded_vocab(), config_name(cfg.model.block), config_name(cfg.model.attention),
      cfg.model.attention == AttentionKind::kSliding ? fmt::format("(W={}, full_every={})", cfg.model.window, cfg.model.full_every) : "",
      config_name(cfg.optim.name), B, T, cfg.train.grad_accum, dp, B * T * cfg.train.grad_accum * dp, threads,
      dtype_name(cfg.train.precision)));
  log.message("data", fmt::format("train: {} samples of {} tokens, one loader per machine (shared memory {}){}",
                                  train.num_samples(), T + 1, train.segment(),
                                  validate ? fmt::format("; val: {} samples, {} batches per evaluation", val_samples, eval_batches) : ""));
  if (rank == 0) {
    const double fpc = hw.flop_per_cycle(precision);
    const char* unit = bf16 ? hw.bf16_unit : hw.fp32_unit;
    const char* source = bf16 && !hw.bf16_measured ? "specification" : "measured";
    log.message("peak", fmt::format(
        "hardware peak ({}): {} cores x {:g} FLOP/cycle ({}, {}) x {:.2f} GHz (measured) = {:.1f} GFLOP/s per rank "
        "(MFU denominator, x {} rank(s)); measured {} GEMM peak: {:.1f} GFLOP/s (ratio denominator); model: {:.3f} "
        "GFLOP per token",
        dtype_name(precision), threads, fpc, unit, source, hw.clock_ghz, hw_gflops, job_ranks, dtype_name(precision),
        gemm_gflops, flops_tok / 1e9));
  }

  auto next = [&](int* in, int* tg) { train.next_batch(in, tg); };
  float last = 0;
  double idle_sum = 0, pp_wait_sum = 0;  // pipeline: this rank's idle fraction and waits, steps after the first
  const uint64_t tokens_per_step = static_cast<uint64_t>(B) * T * cfg.train.grad_accum * dp;
  // An error after the world exists ends the rank at once (after saying it): unwinding would tear
  // down groups with ops in flight while the peers wait (hang_watch.h).
  try {
    for (int step = first_step; step <= cfg.train.steps; step++) {
      StepStats s;
      observer.begin_step(step);
      try {
        s = trainer.train_step(next);
      } catch (const CommError& e) {
        hang_watch.comm_failure(e.what());  // with obs.watchdog: dump and exit 86, does not return
        // Hang analysis: this rank's last collectives (op, group, seq, peer, times, outcome).
        const std::string path = fmt::format("{}/comm_trace_rank{}.json", out_dir, rank);
        try {
          fs::create_directories(out_dir);
          write_comm_trace(path);
          logger().error("rank {}: communication trace written to {}", rank, path);
        } catch (const std::exception&) {
        }
        throw;
      }
      if (stage1_wait_s > 0.0005)
        log.message("checkpoint", fmt::format("step {}: the optimizer waited {:.1f} ms for the stage-1 copy of step {}'s "
                                              "checkpoint", step, stage1_wait_s * 1e3, step - 1));
      stage1_wait_s = 0;
      StepRecord r;
      r.step = s.step; r.total_steps = cfg.train.steps;
      r.loss = s.loss; r.lr = s.lr; r.grad_norm = s.grad_norm; r.step_seconds = s.seconds;
      r.tokens_per_s = static_cast<double>(B) * T * cfg.train.grad_accum * dp / s.seconds;
      // Per-rank peak x every rank of the job (tokens/s counts the whole job's tokens).
      const double model_flops = r.tokens_per_s * flops_tok;
      r.mfu = hw_gflops > 0 ? model_flops / (hw_gflops * 1e9 * job_ranks) : NAN;
      r.mfu_gemm = gemm_gflops > 0 ? model_flops / (gemm_gflops * 1e9 * job_ranks) : NAN;
      r.precision = precision;
      if (trainer.parallel().data_parallel_size() > 1) r.comm_exposed_ms = s.comm_exposed_seconds * 1e3;
      if (cfg.parallel.tp > 1) r.tp_exposed_ms = s.tp_exposed_seconds * 1e3;
      if (cfg.parallel.pp > 1) {
        r.pp_wait_ms = s.pp_wait_seconds * 1e3, r.pp_idle = 1.0 - s.compute_seconds / s.seconds;
        if (step > 1) idle_sum += r.pp_idle, pp_wait_sum += r.pp_wait_ms;
      }
      log.step(r);
      observer.end_step(r, log);
      last = s.loss;
      bool eval_now = validate && ((cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0) || step == cfg.train.steps);
      if (eval_now) {
        last = eval_loss(trainer, val.get(), eval_batches);
        log.eval(step, last);
      }
      // The step boundary: every rank agrees whether to stop (a signal reached any rank; a save
      // failed and checkpoint.on_failure = stop) and whether to save.
      const bool save_failed = report_saves(ckpt, log) && cfg.checkpoint.on_failure == SaveFailurePolicy::kStop;
      // (One all-reduce, which also announces failed saves and says whether one is still in flight.)
      const auto [signalled, stop_on_failure] = ckpt.at_boundary(g_stop_signal.load() != 0, save_failed);
      MS_CHECK(!stop_on_failure, "step {}: a checkpoint save failed and checkpoint.on_failure=stop (see "
               "the checkpoint messages); the last published checkpoint is intact", step);
      observer.after_step(step);
      const bool exit_now = signalled || (cfg.train.exit_after > 0 && step - first_step + 1 >= cfg.train.exit_after);
      const int every = cfg.checkpoint.every;
      if (exit_now || (every > 0 && (step % every == 0 || step == cfg.train.steps))) {
        // The last state is saved even while an earlier save is in flight: waited for here, after the
        // last step. Otherwise a save whose predecessor is still being written is skipped.
        if (exit_now || step == cfg.train.steps) ckpt.drain();
        const Stage1Stats st = ckpt.save(step, train.position(), tokens_per_step * static_cast<uint64_t>(step), s.loss);
        if (st.skipped) {
          log.message("checkpoint", fmt::format("step {}: save skipped: the save of step {} is still being written (a "
                                                "save is never waited for inside a step)", step, st.in_flight));
          record_event("checkpoint skipped", fmt::format("step {}: step {}'s save in flight", step, st.in_flight));
        } else {
          record_event("checkpoint stage 1", fmt::format("step {}: {:.1f} ms, {:.1f} MiB", step, st.seconds * 1e3,
                                                         st.bytes / 1048576.0));
          log.message("checkpoint", fmt::format(
              "step {}: stage 1 stopped training for {:.1f} ms{} ({:.1f} MiB to copy into host memory beside the next "
              "step)", step, st.seconds * 1e3,
              st.waited_seconds > 0 ? fmt::format(", of which {:.1f} ms writing it (checkpoint.async=false)",
                                                  st.waited_seconds * 1e3)
                                    : std::string(), st.bytes / 1048576.0));
        }
      }
      if (exit_now) {
        ckpt.drain();
        const bool failed = any_rank(world, report_saves(ckpt, log));
        log.message("stop", fmt::format("stopped after step {} ({}); train.resume=auto continues from the checkpoint",
                                        step, signalled ? "SIGTERM/SIGINT/SIGHUP" : "train.exit_after"));
        MS_CHECK(!failed, "step {}: the checkpoint save before stopping failed", step);
        return last;
      }
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    hang_watch.error_after_start(e.what(), env.world_size);  // world > 1: does not return
    throw;
  }
  if (first_step > cfg.train.steps) {  // resumed from a checkpoint of the last step: nothing left to train
    log.message("resume", fmt::format("the checkpoint is at train.steps={}: nothing left to train", cfg.train.steps));
    last = static_cast<float>(restored.manifest.loss);
    if (validate) {
      last = eval_loss(trainer, val.get(), eval_batches);
      log.eval(cfg.train.steps, last);
    }
  }
  ckpt.drain();
  MS_CHECK(!any_rank(world, report_saves(ckpt, log) && cfg.checkpoint.on_failure == SaveFailurePolicy::kStop),
           "the final checkpoint save failed and checkpoint.on_failure=stop");
  trainer.parallel().sync_params();
  log.message("data", fmt::format("this machine's loader read {} samples from the token files ({} per step for "
                                  "the whole data-parallel group, plus up to 4 micro-batches read ahead)",
                                  train.samples_read(), static_cast<uint64_t>(B) * cfg.train.grad_accum * dp));
  if (cfg.parallel.pp > 1 && cfg.train.steps > 1) {
    // Each stage's mean idle fraction (1 - compute / step time) and pipeline waits, gathered over the
    // pipeline group, against the closed form of the schedule's bubble, (p - 1) / (v m).
    const int P = cfg.parallel.pp, n = cfg.train.steps - 1;
    const float mine[2] = {static_cast<float>(idle_sum / n), static_cast<float>(pp_wait_sum / n)};
    std::vector<float> all(2 * P);
    grid->pp().all_gather(mine, all.data(), 2, DType::kF32);
    std::string per;
    for (int s = 0; s < P; s++) per += fmt::format("{}stage {}: {:.1f}% idle, {:.1f} ms waited", s ? "; " : "", s, all[2 * s] * 100, all[2 * s + 1]);
    const int v = trainer.parallel().num_chunks(), m = cfg.train.grad_accum;
    log.message("pipeline", fmt::format("mean over steps 2..{}: {} (closed-form bubble (p-1)/(v m) = {:.1f}%)",
                                        cfg.train.steps, per, 100.0 * (P - 1) / (v * m)));
  }
  if (cfg.parallel.trace) {
    fs::create_directories(out_dir);
    const std::string path = fmt::format("{}/trace_rank{}.json", out_dir, rank);
    write_chrome_trace(path, rank);
    log.message("trace", "wrote " + path + " (Chrome trace / Perfetto; one per rank)");
  }
  // The export: rank 0's own parameters when the model is whole, else the whole model assembled
  // over the first data-parallel replica's TP and PP groups (only they take part).
  const bool split = cfg.parallel.tp > 1 || cfg.parallel.pp > 1;
  const bool first_replica = !grid || grid->coord().dp == 0;
  const std::string model_dir = out_dir + "/model";
  std::vector<float> whole;
  if (split && first_replica) whole = trainer.parallel().gather_whole_model();
  if (rank == 0) {
    if (split) export_hf(cfg.model, whole.data(), model_dir);
    else export_hf(model, model_dir);
    log.message("export", fmt::format("saved {} (Hugging Face GPT-2 safetensors + config.json)", model_dir));
  }
  // The sample: rank 0 alone on a whole model (its own, or the pipeline's gathered into one), or
  // with the other parts of its TP group when only tensor parallelism splits the model.
  if (cfg.train.sample_tokens > 0) {
    const bool tp_collective = cfg.parallel.tp > 1 && cfg.parallel.pp == 1;
    Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(tokenizer_dir_or_default(cfg.data.tokenizer_dir));
    // A model whose vocabulary lacks <|endoftext|> (every sample's prompt) cannot be sampled: said, not failed.
    if (tok.eot() >= cfg.model.vocab_size) {
      if (rank == 0)
        log.message("sample", fmt::format("sample skipped: the model's vocabulary ({} ids) does not hold "
                                          "<|endoftext|> ({}), the prompt of every sample", cfg.model.vocab_size,
                                          tok.eot()));
      return last;
    }
    const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
    std::string text;
    if (tp_collective && first_replica && grid->coord().pp == 0) {
      text = sample_text(model, tok, T, cfg.train.sample_tokens, seed, &grid->tp());
    } else if (!tp_collective && rank == 0) {
      if (cfg.parallel.pp > 1) {
        GPT one(cfg.model, 1, T, cfg.train.precision);
        std::copy(whole.begin(), whole.end(), one.params());
        text = sample_text(one, tok, T, cfg.train.sample_tokens, seed, nullptr);
      } else {
        text = sample_text(model, tok, T, cfg.train.sample_tokens, seed, nullptr);
      }
    }
    if (rank == 0) log.message("sample", "sample:\n---\n" + text + "\n---");
  }
  return last;
}

}  // namespace ms
