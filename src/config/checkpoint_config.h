// checkpoint_config: the [checkpoint] section of the config tree: where and how often the run saves
// its complete training state (ckpt/checkpointer.h), and what happens when a save fails. Loading is
// train.resume. Fields are declared once, in the X-macro list below (X(type, name, default, doc));
// config.h builds loading, overrides, help, the resolved dump and validation from it.
#pragma once
#include <string>

#include "config/config_enum.h"  // MS_CONFIG_ENUM, MS_DECLARE_FIELD

namespace ms {

// checkpoint.on_failure: what a run does when a save could not be published.
enum class SaveFailurePolicy : uint8_t { kContinue, kStop };
MS_CONFIG_ENUM(SaveFailurePolicy, {SaveFailurePolicy::kContinue, "continue"}, {SaveFailurePolicy::kStop, "stop"})

#define MS_CHECKPOINT_FIELDS(X)                                                                    \
  X(std::string, dir, "", "checkpoint folder (empty = <train.out_dir>/checkpoints): one step-<N> folder per save plus the 'latest' pointer") \
  X(int, every, 0, "save every N optimizer steps (0 = only on SIGTERM/SIGINT/SIGHUP or train.exit_after)")   \
  X(int, keep_last, 2, "keep the newest K checkpoints (>= 1; the newest valid one is never removed)") \
  X(int, keep_every, 0, "also keep every checkpoint whose step is a multiple of M (0 = none)")       \
  X(bool, async, true, "two-stage save: copy the state into host memory at the step boundary, then a background writer persists it while training goes on (false = persist before the next step)") \
  X(SaveFailurePolicy, on_failure, SaveFailurePolicy::kContinue, "a save that fails (disk full, a rank's write error, non-finite state): 'continue' training (the previous checkpoint stays latest) or 'stop' the run with an error") \
  X(float, timeout_s, 600.0f, "rank 0 waits at most this long (seconds) for every rank's file of a save before declaring it failed (a rank whose write failed says so at the next step boundary, without needing disk space)") \
  X(bool, broadcast_restore, true, "restore: one rank per data-parallel group reads the shared files and broadcasts them (false = every rank reads; for comparison)") \
  X(int, memory_every, -1, "in-memory checkpoints (ckpt/memory_checkpointer.h): every N optimizer steps each rank snapshots its state into host memory (memory_dir) and replicates it to memory_replicas peers on other hosts (where the last replication is still in flight: the snapshot alone); restarts load it instead of reading storage. -1 = auto: every step while a snapshot costs <= 5% of the step (measured), else the interval that keeps it there; 0 = off. Needs memory_dir (set by the driver's executors); train.device='cpu' only") \
  X(int, memory_replicas, 1, "in-memory checkpoints: copies of each rank's snapshot kept on other hosts (0 = only the local one; capped at the hosts - 1)") \
  X(std::string, memory_dir, "", "folder in host memory (tmpfs) for in-memory checkpoints: this host's own snapshots and the replicas it holds (empty = MEGASCALE_MEM_DIR, which `megascale launch --hosts` sets per host and removes at the end; neither: off)")

struct CheckpointConfig {
  MS_CHECKPOINT_FIELDS(MS_DECLARE_FIELD)
  // Checks the fields of this section alone; Config::validate() runs it, then the cross-section checks.
  void validate() const;
};

}  // namespace ms
