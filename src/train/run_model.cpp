// run_model.cpp: see run_model.h.
#include "train/run_model.h"

#include <omp.h>  // omp_get_num_procs

#include <cmath>  // NAN

#include <fmt/format.h>        // fmt::format
#include <fmt/ranges.h>        // fmt::join
#include <nlohmann/json.hpp>   // restore_rank<R>.json

#include "base/aligned.h"       // huge_advised_bytes
#include "base/atomic_file.h"   // write_text_atomic
#include "base/check.h"         // MS_CHECK
#include "base/thread_pin.h"    // pin_omp_threads
#include "ckpt/ckpt_comm.h"     // any_rank
#include "comm/communicator.h"  // all_reduce
#include "config/resume_spec.h" // parse_resume
#include "kernels/gemm_peak.h"  // measure_sgemm_peak_gflops, measure_bf16_gemm_peak_gflops
#include "obs/fault_injection.h"  // restart_attempt
#include "train/peak_cache.h"   // read_peak_cache, write_peak_cache
#include "model/flops.h"        // model_flops_per_token

namespace ms {

namespace {
// The restart's state from in-memory checkpoints (ckpt/memory_restore.h), when every rank's state of
// a step at least as new as storage's has a copy; true when restored (storage is not read).
bool restore_memory(TrainingRun& run, int disk_step) {
  RankGrid* g = run.grid.get();
  float newest = static_cast<float>(disk_step);  // rank 0's view, to every rank (steps < 2^24: exact)
  if (run.world()) run.world()->all_reduce(&newest, 1, DType::kF32, ReduceOp::kMax);
  MemoryRestoreResult& r = run.memory_restored;
  r = restore_from_memory(run.cfg, run.trainer->parallel(), g ? g->memory() : nullptr, run.who,
                          run.memory_dir, static_cast<int>(newest));
  if (!r.restored) {
    run.log->message("resume", fmt::format("in memory: {}; storage is read", r.why_not));
    run.memory_skipped = r.why_not;
    return false;
  }
  run.first_step = r.step + 1;
  run.feed_opt.start = r.data;
  run.log->message("resume", fmt::format("resumed from memory at step {} (this rank's copy: {}; {} agreement round(s); "
                                         "{:.1f} MiB received) in {:.2f} s", r.step, r.source, r.rounds,
                                         r.bytes_received / 1048576.0, r.seconds));
  const nlohmann::json reads = {{"path", "memory"}, {"source", r.source}, {"step", r.step}, {"seconds", r.seconds},
                                {"scan_seconds", r.scan_seconds}, {"agree_seconds", r.agree_seconds},
                                {"verify_seconds", r.verify_seconds}, {"transfer_seconds", r.transfer_seconds},
                                {"load_seconds", r.load_seconds}, {"bytes_received", r.bytes_received},
                                {"weights_from_files", r.weights_from_files},
                                {"rounds", r.rounds}, {"files_read", 0}, {"bytes_read", 0},
                                {"dp", run.dp_rank}, {"tp", run.who.tp}, {"pp", run.stage}};
  run.restore_record = reads;
  return true;
}

// Resume (train.resume): the newest checkpoint that verifies, loaded under this layout; the training
// stream continues where it stopped. A resume in sight (train.resume given as a folder, or `auto`
// with a checkpoint to try; rank 0 looks, everyone follows) skips the weights' random init; if no
// checkpoint verifies after all, the init runs then (the same weights as a fresh start).
void restore_or_init(TrainingRun& run) {
  const Config& cfg = run.cfg;
  RunLog& log = *run.log;
  const std::string ckpt_root = cfg.checkpoint.dir.empty() ? run.out_dir() + "/checkpoints" : cfg.checkpoint.dir;
  run.storage = std::make_unique<LocalStorage>(ckpt_root);
  bool resume_in_sight = false;
  const ResumeSpec resume = parse_resume(cfg.train.resume);
  int disk_step = -1;  // rank 0: the newest step on storage
  if (run.rank == 0 && resume.mode != ResumeMode::kNever) {
    const std::vector<std::string> c = checkpoint_candidates(*run.storage, [](const std::string&) {});
    resume_in_sight = resume.mode == ResumeMode::kPath || !c.empty();
    if (!c.empty()) disk_step = checkpoint_step_of(c.front());
  }
  // In-memory checkpoints (train.resume = auto only): a restarted rank's host may hold its state.
  const bool memory = !run.memory_dir.empty() && resume.mode == ResumeMode::kAuto;
  const bool in_memory = memory && memory_copies_present(run.memory_dir, run.rank);
  resume_in_sight = any_rank(run.world(), resume_in_sight || in_memory);
  const bool from_hf = !cfg.train.init_from.empty();  // train.init_from: the folder's weights when nothing resumes
  RankGrid* g = run.grid.get();
  run.trainer = std::make_unique<Trainer>(cfg, g ? &g->dp() : nullptr, g ? &g->tp() : nullptr,
                                          g ? &g->pp() : nullptr, g ? g->embedding() : nullptr,
                                          /*init_weights=*/!resume_in_sight && !from_hf);
  ParallelModel& pm = run.trainer->parallel();
  MS_CHECK(pm.needs_tokens() == run.feed_opt.needs_tokens, "rank {}: the data feed and the pipeline disagree on "
           "whether this stage reads tokens", run.rank);
  run.who = CheckpointRank{run.rank, run.env.world_size, run.dp_rank, g ? g->coord().tp : 0, run.stage};
  run.startup.mark("model");
  if (memory && resume_in_sight && restore_memory(run, disk_step)) return;
  run.restored = restore_checkpoint(cfg, pm, *run.storage, run.world(), g ? &g->dp() : nullptr, run.who,
                                    [&](const std::string& m) { if (run.rank == 0) log.message("checkpoint", m); });
  const RestoreResult& r = run.restored;
  if (!r.restored && from_hf) {
    pm.import_hf_now(cfg.train.init_from);
    log.message("init", fmt::format("weights from {} (a fresh optimizer at step 0)", cfg.train.init_from));
  } else if (!r.restored && resume_in_sight) {
    pm.init_weights_now();
  }
  if (!r.restored) return;
  run.first_step = r.manifest.step + 1;
  run.feed_opt.start = r.manifest.data;
  log.message("resume", fmt::format("resumed from {} (step {}, {} tokens, data at epoch {} sample {}); rank 0 read "
                                    "{} files ({:.1f} MiB) in {:.2f} s", r.path, r.manifest.step, r.manifest.tokens,
                                    r.manifest.data.epoch, r.manifest.data.index, r.files_read,
                                    r.bytes_read / 1048576.0, r.seconds));
  // Every rank's reads, for the recovery-read accounting (one reader per data-parallel group).
  nlohmann::json reads = {{"checkpoint", r.path}, {"step", r.manifest.step},
                          {"files_read", r.files_read}, {"bytes_read", r.bytes_read},
                          {"files", r.files}, {"seconds", r.seconds},
                          {"read_seconds", r.read_seconds}, {"agree_seconds", r.agree_seconds},
                          {"send_seconds", r.send_seconds},
                          {"dp", run.dp_rank}, {"tp", run.who.tp}, {"pp", run.stage}};
  if (!run.memory_skipped.empty()) reads["memory_skipped"] = run.memory_skipped;
  run.restore_record = reads;
}

// MFU as MegaScale counts it: model FLOP/s over the hardware peak of every rank (cores x FLOP/cycle
// x measured clock in the run's precision); beside it, the ratio to the GEMM throughput this
// machine reaches. Only rank 0 logs, so only rank 0 measures (the others would slow its probes down
// on shared cores); elsewhere both stay NaN.
void measure_peaks_and_log_start(TrainingRun& run) {
  const Config& cfg = run.cfg;
  RunLog& log = *run.log;
  const GPT& model = run.trainer->model();
  const int B = cfg.train.batch_size, T = cfg.train.seq_len;
  const DType precision = model.precision();
  const bool bf16 = precision == DType::kBF16;
  run.hw_gflops = NAN, run.gemm_gflops = NAN;
  if (run.rank == 0) {
    // A restart of this job reuses the first attempt's measurement (train/peak_cache.h).
    const std::string cache = run.out_dir() + "/peaks.json";
    std::optional<MeasuredPeaks> p = restart_attempt() > 0 ? read_peak_cache(cache, run.threads, precision)
                                                           : std::nullopt;
    if (!p) {
      p = MeasuredPeaks{hardware_peak(run.threads),
                        bf16 ? measure_bf16_gemm_peak_gflops() : measure_sgemm_peak_gflops()};
      write_peak_cache(cache, run.threads, precision, *p);
    }
    run.hw = p->hw;
    run.hw_gflops = run.hw.gflops(precision);
    run.gemm_gflops = p->gemm_gflops;
  }
  const double job_ranks = static_cast<double>(run.dp) * cfg.parallel.tp * cfg.parallel.pp;
  run.flops_per_token = model_flops_per_token(cfg.model, T);
  const ModelConfig& m = cfg.model;
  const std::string family = fmt::format(
      "{}, {}, {}(F={}), bias={}, {} head{}", config_name(m.norm), m.rope() ? "rope" : "learned positions",
      config_name(m.mlp), m.ffn(), config_name(m.bias), m.tie_embeddings ? "tied" : "untied",
      m.recompute == RecomputeKind::kNone ? "" : fmt::format(", recompute={}{}", config_name(m.recompute),
                                                             m.full_recompute() ? fmt::format("(every {})", m.recompute_every) : ""));
  log.message("start", fmt::format(
      "megascale: {} parameters (L={} C={} NH={} NKV={} V={} Vp={}; {}), block={}, attention={}{}, optimizer={}, "
      "B={} T={} grad_accum={} dp={} -> {} tokens/step, {} threads, precision={}",
      model.num_params(), m.n_layer, m.n_embd, m.n_head, m.kv_heads(), m.vocab_size, m.padded_vocab(), family,
      config_name(m.block), config_name(m.attention),
      m.attention == AttentionKind::kSliding ? fmt::format("(W={}, full_every={})", m.window, m.full_every) : "",
      config_name(cfg.optim.name), B, T, cfg.train.grad_accum, run.dp, B * T * cfg.train.grad_accum * run.dp,
      run.threads, dtype_name(cfg.train.precision)));
  const uint64_t val_samples = run.val ? run.val->num_samples() : 0;
  log.message("data", fmt::format("train: {} samples of {} tokens, one loader per machine (shared memory {}){}",
                                  run.train->num_samples(), T + 1, run.train->segment(),
                                  run.validating() ? fmt::format("; val: {} samples, {} batches per evaluation",
                                                                 val_samples, run.eval_batches) : ""));
  if (run.rank == 0) {
    const HardwarePeak& hw = run.hw;
    const double fpc = hw.flop_per_cycle(precision);
    const std::string& unit = bf16 ? hw.bf16_unit : hw.fp32_unit;
    const char* source = bf16 && !hw.bf16_measured ? "specification" : "measured";
    log.message("peak", fmt::format(
        "hardware peak ({}): {} cores x {:g} FLOP/cycle ({}, {}) x {:.2f} GHz (measured) = {:.1f} GFLOP/s per rank "
        "(MFU denominator, x {} rank(s)); measured {} GEMM peak: {:.1f} GFLOP/s (ratio denominator); model: {:.3f} "
        "GFLOP per token",
        dtype_name(precision), run.threads, fpc, unit, source, hw.clock_ghz, run.hw_gflops, job_ranks,
        dtype_name(precision), run.gemm_gflops, run.flops_per_token / 1e9));
  }
}
}  // namespace

void build_model(TrainingRun& run) {
  const Config& cfg = run.cfg;
  RunLog& log = *run.log;
  restore_or_init(run);
  run.startup.mark("restore");
  run.train = std::make_unique<MachineBatchFeed>(run.feed_opt);
  run.startup.mark("loader");
  // Pinned after the loaders' prefetch threads exist (they keep the process's CPU set).
  // Oversubscribed (more threads on this machine than usable cores): not pinned, so the scheduler
  // shares the cores among all ranks evenly (pinned, the ranks sharing a core with rank 0's extra
  // work run ~30% slower than the others, a false straggler).
  const int local = run.env.local_world_size;
  if (cfg.train.pin_threads && local * run.threads <= omp_get_num_procs())
    log.message("threads", pin_omp_threads(run.env.local_rank));
  else if (cfg.train.pin_threads)
    log.message("threads", fmt::format("threads not pinned: {} rank(s) x {} thread(s) on this machine exceed its {} "
                                       "usable core(s)", local, run.threads, omp_get_num_procs()));
  run.ckpt = std::make_unique<Checkpointer>(cfg, run.trainer->parallel(), *run.storage, run.world(), run.who,
                                            run.restored.restored ? &run.restored.manifest : nullptr);
  run.startup.mark("checkpointer");
  if (!run.memory_dir.empty()) {
    RankGrid* g = run.grid.get();
    run.memory = std::make_unique<MemoryCheckpointer>(cfg, run.trainer->parallel(), g ? g->memory() : nullptr, run.who,
                                                      run.memory_dir, std::max(0, run.env.host_index));
    log.message("checkpoint", fmt::format("in-memory checkpoints in {}: {:.1f} MiB per snapshot, replicas on rank(s) "
                                          "[{}], {}", run.memory_dir, run.memory->payload_bytes() / 1048576.0,
                                          fmt::join(run.memory->replica_ranks(), ", "),
                                          cfg.checkpoint.memory_every > 0
                                              ? fmt::format("every {} step(s)", cfg.checkpoint.memory_every)
                                              : std::string("every step while it costs <= 5% (auto)")));
  }
  if (run.memory) run.startup.mark("memory checkpointer");
  if (cfg.train.huge_pages)
    log.message("memory", huge_advised_bytes() > 0
                              ? fmt::format("train.huge_pages: {:.1f} MiB of buffers advised onto transparent huge pages",
                                            huge_advised_bytes() / 1048576.0)
                              : std::string("train.huge_pages: no buffer took the advice (no transparent huge pages "
                                            "in this kernel, or no buffer of 2 MiB or more): 4 KiB pages"));
  run.trainer->set_before_update([&run] {
    run.stage1_wait_s = run.ckpt->finish_stage1() + (run.memory ? run.memory->finish_stage1() : 0.0);
  });
  if (run.grid)
    log.message("parallel", fmt::format("world {} ({} backend), grid {} tp={} dp={} pp={}{}", run.env.world_size,
                                        run.grid->world().backend(), cfg.parallel.order, cfg.parallel.tp, run.dp,
                                        cfg.parallel.pp, run.trainer->parallel().describe()));
  measure_peaks_and_log_start(run);
  run.startup.mark("peaks");
  // A restart's account (restore_rank<R>.json: the restore's phases and where start-up went), read
  // by the driver's `recovery` event (report/recovery_report.h).
  log.message("startup", "start-up " + run.startup.describe());
  if (!run.restore_record.is_null()) {
    run.restore_record["startup"] = run.startup.to_json();
    write_text_atomic(fmt::format("{}/restore_rank{}.json", run.out_dir(), run.rank), run.restore_record.dump(1));
  }
}

}  // namespace ms
