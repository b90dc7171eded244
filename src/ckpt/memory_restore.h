// memory_restore: a restart's state from in-memory checkpoints (memory_checkpointer.h), before
// storage is touched. Every rank of the new world:
//  1. scans its host's memory folder: its own snapshots (a restarted rank on a surviving host) and
//     the replicas it holds for other ranks (header checks only, no hash yet);
//  2. shares what it found (one all-gather over the memory group): for every rank, which steps of
//     its state exist where. The world agrees (memory_choice.h) on the newest step of which every rank's state has a
//     copy (its own, else a replica on a surviving host), and uses it only if it is at least as new
//     as the newest checkpoint on storage;
//  3. verifies (XXH64) every copy it will use or send, in parallel on every rank; a copy that fails
//     (a flipped byte) is dropped and the agreement runs again without it (an older step, or
//     storage: never a silently wrong state);
//  4. ranks without their own copy receive it from a holder over the memory group (headers, then
//     payloads, every transfer at once), checking the XXH64 again on arrival;
//  5. loads it: each rank's runs (weights, both moments) straight into its state
//     (ParallelModel::load_own_runs); under ZeRO the model's weights then complete with the
//     all-gather that follows every update, except where every rank of a data-parallel group and
//     every copy the group uses sit in one memory folder (one host): each rank then reads the
//     other replicas' weights from their verified files (the same bits, no collective; ~1 s of
//     loopback traffic for GPT-2 small on 2 cores).
// The layout must be the one the snapshots were taken under (the `layout` hash: job, model, dp x tp
// x pp, this rank's runs); a changed layout (data parallelism shrunk) skips memory for storage,
// which reshards. Every rank gets the same decision.
#pragma once
#include <cstdint>
#include <string>

#include "ckpt/checkpointer.h"        // CheckpointRank
#include "config/config.h"            // Config
#include "data/dataloader.h"          // DataLoader::Position

namespace ms {

class Communicator;
class ParallelModel;

struct MemoryRestoreResult {
  bool restored = false;
  std::string why_not;       // not restored: the reason (the same on every rank)
  int step = 0;
  DataLoader::Position data;
  uint64_t tokens = 0;
  float loss = 0;
  std::string source;        // this rank's copy: "local" or "peer <rank>"
  int rounds = 0;            // agreements run (more than 1: a copy failed its check)
  bool weights_from_files = false;  // the other replicas' weights read from this host's copies (no all-gather)
  uint64_t bytes_received = 0;
  double seconds = 0, scan_seconds = 0, agree_seconds = 0, verify_seconds = 0, transfer_seconds = 0,
         load_seconds = 0;
};

// Whether `dir` holds any snapshot file of `rank` (its own or replicas it holds): a restart may
// find its state in memory. A cheap look (names only).
bool memory_copies_present(const std::string& dir, int rank);

// Every rank (collective over group, the world's memory group, nullptr for one rank; loading completes
// ZeRO's weights over each data-parallel group). dir: this host's memory folder; disk_step: the step of the
// newest checkpoint on storage as rank 0 sees it (-1: none).
MemoryRestoreResult restore_from_memory(const Config& cfg, ParallelModel& model, Communicator* group,
                                        CheckpointRank who, const std::string& dir,
                                        int disk_step);

}  // namespace ms
