// training_run: one rank's training run (`megascale train`) as named phases over one state, so the
// application only wires them (apps/train_run.cpp):
//   start_world      the world and rank grid from the environment (comm/comm_env.h), the layout
//                    resolved and validated before any work, hang localization (hang_watch.h), the
//                    run folder locked (ckpt/dir_lock.h), records (run_observer.h), threads, the
//                    resolved config and the run log;
//   open_data        the training feed's options (one loader per machine) and the validation loader;
//   build_model      (run_model.h) the trainer over its ParallelModel, the checkpoint restore or the
//                    fresh init, the machine's feed, the checkpointer, the MFU denominators;
//   run_steps        (run_loop.h) the steps, evaluations, checkpoints and the stop at a boundary;
//   finish_run       (run_finish.h) the final save, the pipeline summary, trace, export and sample.
// Every collective a phase needs runs inside it, on every rank. TrainingRun's members are declared
// in the order the run builds them, so they are torn down in reverse (the checkpointer before the
// model, the model before the groups, the groups before the hang watch).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/clock.h"           // Stopwatch
#include "ckpt/checkpointer.h"    // Checkpointer, CheckpointRank
#include "ckpt/memory_checkpointer.h"  // MemoryCheckpointer
#include "ckpt/memory_restore.h"       // MemoryRestoreResult
#include "ckpt/dir_lock.h"        // DirLock
#include "ckpt/restore.h"         // RestoreResult
#include "ckpt/storage.h"         // LocalStorage
#include "comm/comm_env.h"        // CommEnv
#include "comm/rank_grid.h"       // RankGrid
#include "config/config.h"        // Config
#include "data/dataloader.h"      // DataLoader
#include "data/shared_batches.h"  // MachineBatchFeed, MachineFeedOptions
#include "kernels/hw_peak.h"      // HardwarePeak
#include "train/hang_watch.h"     // HangWatch
#include "train/run_log.h"        // RunLog
#include "train/run_observer.h"   // RunObserver
#include "train/trainer.h"        // Trainer

namespace ms {

// Where a rank's start-up time goes (a restart's seconds before its first step): each phase's
// seconds, in order, from the TrainingRun's construction.
struct StartupPhases {
  Stopwatch since_start, since_mark;
  std::vector<std::pair<std::string, double>> phases;
  void mark(const std::string& phase) {
    phases.emplace_back(phase, since_mark.seconds());
    since_mark.restart();
  }
  std::string describe() const;   // "2.31 s: world 0.52, data 0.10, ..."
  nlohmann::json to_json() const;  // {"total": s, "<phase>": s, ...}
};

struct TrainingRun {
  StartupPhases startup;
  // --- start_world ---
  Config cfg;                                 // resolved against the world size
  CommEnv env;
  std::unique_ptr<HangWatch> hang_watch;
  std::unique_ptr<RankGrid> grid;             // null for one process
  int rank = 0, dp = 1, dp_rank = 0, stage = 0, threads = 1;
  std::vector<std::unique_ptr<DirLock>> dir_locks;
  std::unique_ptr<RunObserver> observer;
  std::unique_ptr<RunLog> log;
  // --- open_data ---
  MachineFeedOptions feed_opt;
  std::unique_ptr<DataLoader> val;            // ranks that use tokens, when data.val is set
  int eval_batches = 0;                       // the same on every rank
  // --- build_model ---
  std::unique_ptr<LocalStorage> storage;
  std::unique_ptr<Trainer> trainer;
  RestoreResult restored;
  int first_step = 1;
  std::unique_ptr<MachineBatchFeed> train;
  CheckpointRank who;
  std::unique_ptr<Checkpointer> ckpt;
  // In-memory checkpoints (checkpoint.memory_every, ckpt/memory_checkpointer.h): this host's
  // memory folder ("" = off), the saver, and what a restart restored from memory.
  std::string memory_dir;
  std::unique_ptr<MemoryCheckpointer> memory;
  MemoryRestoreResult memory_restored;
  std::string memory_skipped;                 // memory was looked at but storage restored: why
  nlohmann::json restore_record;              // this rank's restore_rank<R>.json (null: nothing restored)
  bool memory_saved = false;                  // a memory save started since the interval was last agreed
  double stage1_wait_s = 0;                   // the optimizer's wait for a stage-1 copy, this step
  HardwarePeak hw;                            // rank 0 measures; NaN peaks elsewhere
  double hw_gflops = 0, gemm_gflops = 0, flops_per_token = 0;

  Communicator* world() const { return grid ? &grid->world() : nullptr; }
  bool validating() const { return !cfg.data.val.empty(); }
  const std::string& out_dir() const { return cfg.train.out_dir; }
  // Tokens per step of the whole job: B x T x grad_accum x dp.
  uint64_t tokens_per_step() const;
};

// How run_steps ended.
struct LoopEnd {
  float last = 0;        // the last loss (validation when measured, else training)
  bool stopped = false;  // a signal or train.exit_after ended it early (saved; nothing else to do)
  double idle_sum = 0, pp_wait_sum = 0;  // pipeline: this rank's idle fraction and waits, steps after the first
};

// The stop signals (SIGTERM / SIGINT / SIGHUP: save at the next step boundary and exit 0; SIGUSR1:
// the driver's recovery stop: a hang dump and exit at once). Call before any thread exists: the
// signals are blocked in every thread and taken by one thread in sigwait (a handler on a compute
// thread could land in oneDNN's JIT kernels, which may keep data below the stack pointer).
void install_stop_handlers();
// The stop signal received so far (0: none).
int stop_signal();

void start_world(TrainingRun& run, const Config& cfg);
void open_data(TrainingRun& run);
// The meta.json `prepare` writes beside the shards of data.train (a folder, a shard or a glob of
// shards: the folder that holds them).
std::string data_meta_path(const std::string& train);

}  // namespace ms
