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
// communication stream: comm/rank_grid.h), every rank at the same step: a replication round. A
// round starts only where no rank has one in flight (agreed at the step boundary); at a due step
// where one is still in flight (a replica takes longer than a step over a slow link), each rank
// takes a LOCAL snapshot instead, on a second worker (copy and hash, no transfer), so that a rank
// whose host survives restarts from at most one step back. Own snapshots rotate over
// kOwnSnapshotSlots (4) files: a save never overwrites the copy of the last round every rank finished
// (pinned until the next one is finished everywhere: a lost host's state comes back from that
// round's replicas, the survivors' from their own copy of the same step), nor the one the round in
// flight is sending, nor one still being hashed; of the rest it takes the oldest. Each replica has
// two slots, alternating per round, so the newest complete replica stays intact while the next
// one arrives.
// Replica placement (replica_destinations): the rank at the same position on each of the next
// `replicas` hosts (host order of the world's ranks): one host's loss never takes a rank's snapshot
// and all its replicas.
// The interval: checkpoint.memory_every = N > 0 fixes it; -1 (auto) starts at every step and, after
// each round that every rank finished, agrees (max over ranks) on the smallest interval at which a
// round costs at most 5% of the steps it spans: its cost being the worker's CPU time (on shared
// cores the worker's CPU is taken from training). Local snapshots are due at the same steps.
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
  bool ok = false, local = false;  // local: a snapshot without replicas
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

  // A replication round is in flight on this rank (its copy, hash or transfer).
  bool busy() const;
  // Whether a snapshot of `step` is due (a round where none is in flight anywhere, else a local one).
  bool due(int step) const { return interval_ > 0 && step % interval_ == 0; }
  int interval() const { return interval_; }
  // Stage 1 of a round at the step boundary after `step` optimizer steps (every rank at the same
  // step, where no rank has a round in flight: agreed).
  MemorySaveStats save(int step, DataLoader::Position data, uint64_t tokens, float loss);
  // A local snapshot (no replicas) at a due boundary where a round is in flight somewhere; none
  // (saved = false) while this rank's last local one is still being hashed.
  MemorySaveStats save_local(int step, DataLoader::Position data, uint64_t tokens, float loss);
  // At the first boundary where every rank finished the last round (agreed): its own copy becomes
  // the pinned one (if the round succeeded here), the previous pin is released.
  void round_finished_everywhere();
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
    int step = 0, slot = 0;
    bool replicate = true;  // a round; false: a local snapshot
    SnapshotHeader header{};
  };
  Job make_job(int step, DataLoader::Position data, uint64_t tokens, float loss, bool replicate);
  // save() (replicate) and save_local(): the job's slot taken and queued for its worker.
  MemorySaveStats enqueue(int step, DataLoader::Position data, uint64_t tokens, float loss, bool replicate);
  int pick_slot() const;  // under mu_: the oldest own slot a save may overwrite, -1 if none
  void worker_main(bool local);
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
  std::array<SnapshotFile, kOwnSnapshotSlots> own_;
  std::array<int, kOwnSnapshotSlots> slot_step_{};  // the step each own slot holds or is getting (-1: none)
  std::array<bool, kOwnSnapshotSlots> slot_busy_{};  // a worker writes or hashes it
  int pin_round_ = -1, pin_done_ = -1;  // the round in flight's slot; the last round finished everywhere
  bool round_ok_ = true;                // the last round succeeded on this rank
  std::vector<std::array<SnapshotFile, 2>> held_;  // per source, two slots
  std::vector<int> held_next_;         // per source: the slot its next replica goes to
  int interval_ = 1;
  double last_cost_s_ = 0;             // the last round's worker CPU seconds

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_, local_jobs_;  // a job stays at its queue's front until its worker is done
  bool stop_ = false;
  int copy_slot_ = -1;  // the own slot being copied, which the next update waits for (-1: none)
  std::vector<MemoryOutcome> outcomes_;
  std::thread worker_, local_worker_;
};

}  // namespace ms
