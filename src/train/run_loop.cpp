// run_loop.cpp: see run_loop.h.
#include "train/run_loop.h"

#include <cmath>  // NAN

#include <fmt/format.h>  // fmt::format

#include "base/check.h"          // MS_CHECK
#include "base/log.h"            // logger
#include "ckpt/ckpt_comm.h"      // any_rank
#include "comm/communicator.h"   // CommError
#include "obs/run_recorder.h"    // record_event, flush_active_recorder
#include "train/evaluation.h"    // eval_loss

namespace ms {

namespace {
// One trainer step; a communication failure is the hang watch's (does not return under
// obs.watchdog), else the error names where this rank's last collectives are: its record file
// (obs.records), flushed now (op, group, seq, peer, times, outcome; `megascale trace` merges them).
StepStats step_or_report(TrainingRun& run) {
  try {
    return run.trainer->train_step([&run](int* in, int* tg) { run.train->next_batch(in, tg); });
  } catch (const CommError& e) {
    run.hang_watch->comm_failure(e.what());  // with obs.watchdog: dump and exit 86, does not return
    if (run.cfg.obs.records) {
      flush_active_recorder();
      logger().error("rank {}: its last communication ops are in {}/records/rank-{:05d}.jsonl", run.rank,
                     run.out_dir(), run.rank);
    }
    throw;
  }
}

// The step's record for the run log and the observer.
StepRecord step_record(const TrainingRun& run, const StepStats& s) {
  const Config& cfg = run.cfg;
  const double job_ranks = static_cast<double>(run.dp) * cfg.parallel.tp * cfg.parallel.pp;
  StepRecord r;
  r.step = s.step; r.total_steps = cfg.train.steps;
  r.loss = s.loss; r.lr = s.lr; r.grad_norm = s.grad_norm; r.step_seconds = s.seconds;
  r.tokens_per_s = static_cast<double>(run.tokens_per_step()) / s.seconds;
  // Per-rank peak x every rank of the job (tokens/s counts the whole job's tokens).
  const double model_flops = r.tokens_per_s * run.flops_per_token;
  r.mfu = run.hw_gflops > 0 ? model_flops / (run.hw_gflops * 1e9 * job_ranks) : NAN;
  r.mfu_gemm = run.gemm_gflops > 0 ? model_flops / (run.gemm_gflops * 1e9 * job_ranks) : NAN;
  r.precision = run.trainer->model().precision();
  // The pipeline sums the tied embedding's two copies each step: data-parallel-like communication.
  if (run.dp > 1 || cfg.parallel.pp > 1) r.comm_exposed_ms = s.comm_exposed_seconds * 1e3;
  if (cfg.parallel.tp > 1) r.tp_exposed_ms = s.tp_exposed_seconds * 1e3;
  if (cfg.parallel.pp > 1) r.pp_wait_ms = s.pp_wait_seconds * 1e3, r.pp_idle = 1.0 - s.compute_seconds / s.seconds;
  return r;
}

// A save at this step boundary: stage 1 now (or skipped while both snapshot buffers are busy).
void save_checkpoint(TrainingRun& run, int step, bool exit_now, float loss) {
  Checkpointer& ckpt = *run.ckpt;
  // The last state is saved even while an earlier save is in flight: waited for here, after the
  // last step. Otherwise a save whose predecessor is still being written is skipped.
  if (exit_now || step == run.cfg.train.steps) ckpt.drain();
  const Stage1Stats st = ckpt.save(step, run.train->position(), run.tokens_per_step() * static_cast<uint64_t>(step),
                                   loss);
  if (st.skipped) {
    run.log->message("checkpoint", fmt::format("step {}: save skipped: the save of step {} is still being written (a "
                                               "save is never waited for inside a step)", step, st.in_flight));
    record_event("checkpoint skipped", fmt::format("step {}: step {}'s save in flight", step, st.in_flight));
    return;
  }
  record_event("checkpoint stage 1", fmt::format("step {}: {:.1f} ms, {:.1f} MiB", step, st.seconds * 1e3,
                                                 st.bytes / 1048576.0));
  run.log->message("checkpoint", fmt::format(
      "step {}: stage 1 stopped training for {:.1f} ms{} ({:.1f} MiB to copy into host memory beside the next "
      "step)", step, st.seconds * 1e3,
      st.waited_seconds > 0 ? fmt::format(", of which {:.1f} ms writing it (checkpoint.async=false)",
                                          st.waited_seconds * 1e3)
                            : std::string(), st.bytes / 1048576.0));
}

// In-memory checkpoints at a step boundary (ckpt/memory_checkpointer.h): outcomes logged; where no
// rank has a round in flight (agreed), the last round's copy pinned and the interval re-agreed
// after a round every rank finished, and the next round started when due; where one is in flight,
// a local snapshot when due. Every rank takes the same branches.
void memory_boundary(TrainingRun& run, int step, bool busy_anywhere, float loss, double step_seconds) {
  MemoryCheckpointer& mem = *run.memory;
  for (const MemoryOutcome& o : mem.take_outcomes()) {
    record_event(o.ok ? (o.local ? "memory snapshot local" : "memory snapshot") : "memory snapshot failed",
                 fmt::format("step {}: copy {:.1f} ms, hash {:.1f} ms, replication {:.1f} ms ({:.1f} MiB in), worker "
                             "CPU {:.1f} ms", o.step, o.copy_seconds * 1e3, o.hash_seconds * 1e3,
                             o.replicate_seconds * 1e3, o.replica_bytes / 1048576.0, o.worker_cpu_seconds * 1e3));
    if (!o.ok) run.log->message("checkpoint", fmt::format("in-memory snapshot of step {} failed: {}", o.step, o.message));
  }
  if (busy_anywhere) {
    if (mem.due(step)) {
      const MemorySaveStats st = mem.save_local(step, run.train->position(),
                                                run.tokens_per_step() * static_cast<uint64_t>(step), loss);
      if (st.saved) record_event("memory snapshot local stage 1", fmt::format("step {}: {:.2f} ms", step, st.seconds * 1e3));
    }
    return;
  }
  if (run.memory_saved) {  // every rank finished the last round: its copy pinned, its cost decides the interval
    mem.round_finished_everywhere();
    mem.agree_interval(step_seconds);
    run.memory_saved = false;
  }
  if (!mem.due(step)) return;
  const MemorySaveStats st = mem.save(step, run.train->position(), run.tokens_per_step() * static_cast<uint64_t>(step),
                                      loss);
  run.memory_saved = true;
  record_event("memory snapshot stage 1", fmt::format("step {}: {:.2f} ms, {:.1f} MiB (interval {})", step,
                                                      st.seconds * 1e3, st.bytes / 1048576.0, mem.interval()));
}

// The step boundary: every rank agrees whether to stop and whether to save. Returns true when the
// run stops here (saved).
bool step_boundary(TrainingRun& run, int step, float loss, double step_seconds) {
  const Config& cfg = run.cfg;
  // A signal reached any rank; a save failed and checkpoint.on_failure = stop (one all-reduce, which
  // also announces failed saves and says whether one is still in flight, on storage or in memory).
  const bool save_failed = report_saves(run) && cfg.checkpoint.on_failure == SaveFailurePolicy::kStop;
  const auto [signalled, stop_on_failure, memory_busy] =
      run.ckpt->at_boundary(stop_signal() != 0, save_failed, run.memory && run.memory->busy());
  MS_CHECK(!stop_on_failure, "step {}: a checkpoint save failed and checkpoint.on_failure=stop (see "
           "the checkpoint messages); the last published checkpoint is intact", step);
  run.observer->after_step(step);
  const bool exit_now = signalled || (cfg.train.exit_after > 0 && step - run.first_step + 1 >= cfg.train.exit_after);
  const int every = cfg.checkpoint.every;
  if (exit_now || (every > 0 && (step % every == 0 || step == cfg.train.steps))) save_checkpoint(run, step, exit_now, loss);
  if (run.memory && !exit_now && step < cfg.train.steps) memory_boundary(run, step, memory_busy, loss, step_seconds);
  if (!exit_now) return false;
  run.ckpt->drain();
  const bool failed = any_rank(run.world(), report_saves(run));
  run.log->message("stop", fmt::format("stopped after step {} ({}); train.resume=auto continues from the checkpoint",
                                       step, signalled ? "SIGTERM/SIGINT/SIGHUP" : "train.exit_after"));
  MS_CHECK(!failed, "step {}: the checkpoint save before stopping failed", step);
  return true;
}
}  // namespace

bool report_saves(TrainingRun& run) {
  bool failed = false;
  for (const SaveOutcome& o : run.ckpt->take_outcomes()) {
    if (o.whole)
      run.log->message("checkpoint", fmt::format("step {}: {} (stage 2: {:.2f} s)", o.step, o.message, o.seconds));
    record_event(o.ok ? "checkpoint saved" : "checkpoint failed", fmt::format("step {}: {}", o.step, o.message));
    failed = failed || !o.ok;
  }
  return failed;
}

LoopEnd run_steps(TrainingRun& run) {
  const Config& cfg = run.cfg;
  RunLog& log = *run.log;
  LoopEnd end;
  try {
    for (int step = run.first_step; step <= cfg.train.steps; step++) {
      run.observer->begin_step(step);
      const StepStats s = step_or_report(run);
      if (run.stage1_wait_s > 0.0005)
        log.message("checkpoint", fmt::format("step {}: the optimizer waited {:.1f} ms for the stage-1 copy of step {}'s "
                                              "checkpoint", step, run.stage1_wait_s * 1e3, step - 1));
      run.stage1_wait_s = 0;
      const StepRecord r = step_record(run, s);
      if (cfg.parallel.pp > 1 && step > 1) end.idle_sum += r.pp_idle, end.pp_wait_sum += r.pp_wait_ms;
      log.step(r);
      run.observer->end_step(r, log);
      end.last = s.loss;
      const bool eval_now =
          run.validating() && ((cfg.train.eval_every > 0 && step % cfg.train.eval_every == 0) || step == cfg.train.steps);
      if (eval_now) {
        end.last = eval_loss(*run.trainer, run.val.get(), run.eval_batches);
        log.eval(step, end.last);
      }
      if (step_boundary(run, step, s.loss, s.seconds)) {
        end.stopped = true;
        return end;
      }
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    run.hang_watch->error_after_start(e.what(), run.env.world_size);  // world > 1: does not return
    throw;
  }
  return end;
}

}  // namespace ms
