// shared_batches: one data loader per machine (MegaScale §3.4). Every rank on a machine constructs a
// MachineBatchFeed; local rank 0 also runs the producer, a thread that owns the machine's only
// DataLoader (the only one that opens and validates the token files) and writes each micro-batch
// of the whole data-parallel group (dp x B samples: exactly what dp loaders with set_dp_slice
// would read together, so the sample order stays the pure function of (seed, epoch, index)) into a
// POSIX shared-memory ring. Each rank that needs tokens copies its dp slice out of it; ranks that
// need none (middle pipeline stages) never read and are never waited for.
// Guarantees:
//  - next_batch returns, bit for bit, what DataLoader(...).set_dp_slice(dp_rank, dp) would after
//    set_position(start) (the same paths, B, T, seed, shuffle); position() is that loader's position.
//  - The producer runs up to ring_slots micro-batches ahead (the next step's batches are prepared
//    while this one computes) and never overwrites a slot a rank that needs tokens has not read.
//  - The segment header names the format version, the job (xxHash64 of the job key), the producer's
//    pid and start time, B, T, dp, the start position, samples per epoch, the micro-batches
//    published and the samples read. A rank waiting longer than timeout_s (to attach, or for a
//    micro-batch), or seeing the producer's process gone, stops with an ms::Error naming the loader
//    (its name, the segment, the pid of local rank 0). A producer that cannot open its files
//    publishes the reason, so every local rank fails with it at once.
//  - Nothing is left in /dev/shm: the segment is named segment_name(job_key), and the last local
//    rank to attach unlinks the name before any rank leaves its constructor (the mappings stay
//    valid, so a later SIGKILL of any rank leaves nothing); it is also unlinked on every error and
//    destruction path, and by a SIGTERM / SIGINT handler during the attach window (a program that
//    takes signals itself, or ends with _Exit, calls unlink_attaching() first). If local rank 0
//    is SIGKILLed inside that window, the ranks already attached name it and remove the name (when
//    it is still their segment); otherwise the next run's producer removes and recreates it. A rank
//    never attaches to a segment whose creator is dead (pid + start time, zombies count as dead) or
//    whose job or format differs.
//  - samples_read(): samples the producer read from the files (once per machine, not per rank).
// Resume: all local ranks pass the same `start` (checked at attach); set_position() after
// construction is not offered (every rank and the producer would have to agree on a ring flush):
// build a new feed at the new position instead.
// Cross-process synchronisation: atomics in the shared mapping; waiting ranks sleep on futexes in
// the mapping (woken by the other side, at most 20 ms between liveness checks).
#pragma once
#include <sys/types.h>  // ino_t

#include <atomic>
#include <cstdint>
#include <exception>  // std::exception_ptr
#include <memory>     // std::unique_ptr
#include <string>
#include <thread>
#include <vector>

#include "data/dataloader.h"  // DataLoader::Position

namespace ms {

struct MachineFeedOptions {
  std::vector<std::string> paths;  // training token files (as DataLoader)
  int B = 1, T = 1, vocab_size = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  std::string name = "data.train";  // labels errors
  int dp = 1, dp_rank = 0;          // this rank's data-parallel slice
  bool needs_tokens = true;         // false: this rank never calls next_batch
  int local_rank = 0, local_world_size = 1;  // CommEnv::local_rank / local_world_size
  std::string job_key;              // unique per job on the machine (run id, store, run directory)
  DataLoader::Position start;       // stream position of the first micro-batch (same on every rank)
  int ring_slots = 4;               // micro-batches the producer may run ahead
  double timeout_s = 60;            // data.loader_timeout_s
  uint64_t stall_after = UINT64_MAX;  // test hook: the producer makes this many micro-batches, then stalls
};

class MachineBatchFeed {
 public:
  // Local rank 0 creates the segment and starts the producer; every rank attaches, and the
  // constructor returns once all local ranks have (so the name is already gone from /dev/shm).
  explicit MachineBatchFeed(const MachineFeedOptions& opt);
  ~MachineBatchFeed();
  MachineBatchFeed(const MachineBatchFeed&) = delete;
  MachineBatchFeed& operator=(const MachineBatchFeed&) = delete;

  // This rank's B x T inputs and targets of the next micro-batch (needs_tokens ranks only).
  void next_batch(int* inputs, int* targets);
  uint64_t num_samples() const;   // samples per epoch of the training stream
  // Stream position of this rank's next micro-batch (DataLoader::position() with the same slice).
  DataLoader::Position position() const;
  uint64_t samples_read() const;  // by the machine's producer, from the files, so far
  uint64_t produced() const;      // micro-batches the producer has published so far
  const std::string& segment() const { return segment_; }

  // "/megascale-data-<uid>-<xxh64(job_key) in hex>": the segment name of a job on this machine.
  static std::string segment_name(const std::string& job_key);
  // Local ranks attached to the segment of that name; -1 when there is none (diagnostics, tests).
  static int attached_ranks(const std::string& segment);
  // Removes the name of the segment a feed of this process is attaching to, if one is inside its
  // attach window (else does nothing). Async-signal-safe and callable from any thread: for a process
  // about to end without unwinding (_Exit, as the trainer does on the driver's SIGUSR1), whose
  // feed's own SIGTERM / SIGINT handler never runs.
  static void unlink_attaching() noexcept;

 private:
  struct Header;
  void create_segment();
  void attach_segment();
  void wait_all_attached();
  void producer_loop();
  bool producer_alive() const;
  void unlink_if_ours() const;  // removes the name if it still names the segment this rank mapped
  [[noreturn]] void fail_loader(const std::string& why) const;
  Header* header() const;
  int* slot_inputs(uint64_t slot) const;

  MachineFeedOptions opt_;
  std::string segment_;
  size_t bytes_ = 0;
  size_t slot_ints_ = 0;  // dp*B*T
  void* map_ = nullptr;
  size_t map_bytes_ = 0;  // the mapping's length (bytes_ once the shapes agree)
  ino_t inode_ = 0;       // of the segment this rank mapped (to unlink only that one)
  bool unlinked_ = false;
  std::exception_ptr load_error_;  // local rank 0: why the loader could not be opened
  uint64_t consumed_ = 0;   // micro-batches this rank has read
  std::unique_ptr<DataLoader> loader_;  // local rank 0: the machine's only loader (producer thread)
  std::thread producer_;
  std::atomic<bool> stop_{false};
};

}  // namespace ms
