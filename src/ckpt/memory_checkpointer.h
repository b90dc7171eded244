// memory_checkpointer: in-memory checkpoints (after Gemini, SOSP '23, and ByteRobust): every
// `interval()` steps each rank snapshots the state it owns into a file of its host's memory folder
// (memory_snapshot.h), and sends a copy to checkpoint.memory_replicas ranks on OTHER hosts, which
// keep it in their own host's folder. A restart (memory_restore.h) then reads state from memory:
// its own snapshot where its host survived (the folder outlives the process), else a replica from a
// surviving host, over the network; storage only when no complete copy of a step exists everywhere.
// What a snapshot holds (its payload): this rank's ParamState runs of every tensor its model chunks
// hold (ParallelModel::own_state_runs: ZeRO pieces under data parallelism, the tensor-parallel part,
// replicated tensors too) — for each run its fp32 weights, then its two Adam moments — and in the
// header the step, the data position, the tokens and the loss. Its `layout` hash ties it to the
// job (train.out_dir, the model, the layout) and to this rank's runs, so a snapshot is only ever
// loaded into the state it came from.
// The save never stalls a step: at a step boundary save() hands the runs to the worker thread,
// which copies them into the snapshot (finish_stage1(), before the next optimizer update, waits
// for that copy only: the state changes in the update), then at low priority hashes it (XXH64),
// marks it complete and exchanges replicas with its peers on the `memory` group (its own
// communication stream: comm/rank_grid.h), every rank at the same step. Two slots per snapshot
// (own and each replica) alternate, so the newest complete copy stays intact while the next one
// is written; a rank starts a new save only when no rank has one in flight (agreed at the step
// boundary), so the newest step every rank completed is always whole somewhere.
// Replica placement (replica_destinations): the rank at the same position on each of the next
// `replicas` hosts (host order of the world's ranks): one host's loss never takes a rank's snapshot
// and all its replicas.
// The interval: checkpoint.memory_every = N > 0 fixes it; -1 (auto) starts at every step and, after
// each save that every rank finished, agrees (max over ranks) on the smallest interval at which a
// save costs at most 5% of the steps it spans: its cost being the training thread's stall plus the
// worker's CPU time (on shared cores the worker's CPU is taken from training).
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"      // CheckpointRank
#include "ckpt/memory_snapshot.h"   // SnapshotFile
#include "config/config.h"          // Config
#include "data/dataloader.h"        // DataLoader::Position
#include "parallel/parallel_model.h"  // ParallelModel, StateRun

namespace ms {

class Communicator;

// The ranks that hold world rank `rank`'s replicas: the rank at the same position among its
// host's ranks on each of the next `replicas` hosts (hosts in order of their lowest rank; a host
// with fewer ranks: position modulo its count); at most hosts - 1 of them. host_of: each world
// rank's host index.
std::vector<int> replica_destinations(const std::vector<int>& host_of, int rank, int replicas);

// The folder of this rank's snapshots: checkpoint.memory_dir, else $MEGASCALE_MEM_DIR; "" = off.
std::string memory_dir_of(const Config& cfg);

// The payload's layout and the job it belongs to (the snapshot header's `layout`).
uint64_t memory_layout_hash(const Config& cfg, int rank, int world, const std::vector<StateRun>& runs);

struct MemorySaveStats {
  bool saved = false;
  double seconds = 0;  // the training thread's stall
  uint64_t bytes = 0;
};

struct MemoryOutcome {
  int step = 0;
  bool ok = false;
  std::string message;
  double copy_seconds = 0, hash_seconds = 0, replicate_seconds = 0, worker_cpu_seconds = 0;
  uint64_t bytes = 0, replica_bytes = 0;  // own payload; replica payloads received
};

class MemoryCheckpointer {
 public:
  // Every rank (collective over group, which may be nullptr for one process): gathers every rank's
  // host (host_index: $MEGASCALE_HOST_INDEX, or 0) and payload size, and creates its snapshot files
  // in `dir`.
  MemoryCheckpointer(const Config& cfg, ParallelModel& model, Communicator* group, CheckpointRank who,
                     std::string dir, int host_index);
  ~MemoryCheckpointer();
  MemoryCheckpointer(const MemoryCheckpointer&) = delete;
  MemoryCheckpointer& operator=(const MemoryCheckpointer&) = delete;

  // A save is in flight on this rank (copy, hash or replication).
  bool busy() const;
  // At a boundary where no rank has a save in flight (agreed): whether the save of `step` is due.
  bool due(int step) const { return interval_ > 0 && step % interval_ == 0; }
  int interval() const { return interval_; }
  // Stage 1 at the step boundary after `step` optimizer steps (every rank at the same step).
  MemorySaveStats save(int step, DataLoader::Position data, uint64_t tokens, float loss);
  // Before the next optimizer update: waits for the copy of a save still running; seconds waited.
  double finish_stage1();
  // Collective over the group, at a boundary where every rank's last save just finished (agreed):
  // with memory_every = -1, agrees on the interval from the measured costs and the step time.
  void agree_interval(double step_seconds);
  std::vector<MemoryOutcome> take_outcomes();
  const std::vector<int>& replica_ranks() const { return dests_; }
  uint64_t payload_bytes() const { return payload_bytes_; }

 private:
  struct Job {
    int step = 0;
    SnapshotHeader header{};
  };
  void worker_main();
  MemoryOutcome run_job(const Job& job);
  void replicate(const Job& job, MemoryOutcome& out);

  Config cfg_;
  ParallelModel& model_;
  Communicator* group_ = nullptr;
  CheckpointRank who_;
  std::string dir_;
  std::vector<StateRun> runs_;         // this rank's runs (their pointers stay valid for the run)
  uint64_t layout_ = 0, payload_bytes_ = 0;
  std::vector<int> host_of_;           // world rank -> host
  std::vector<uint64_t> bytes_of_;     // world rank -> payload bytes
  std::vector<int> dests_, sources_;   // who holds my replicas; whose replicas I hold
  std::array<SnapshotFile, 2> own_;
  std::vector<std::array<SnapshotFile, 2>> held_;  // per source, two slots
  int next_slot_ = 0;
  std::vector<int> held_next_;         // per source: the slot its next replica goes to
  int interval_ = 1;
  double last_cost_s_ = 0;             // the last save's stall + worker CPU seconds

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool copying_ = false, working_ = false, stop_ = false;
  std::vector<MemoryOutcome> outcomes_;
  std::thread worker_;
};

}  // namespace ms
