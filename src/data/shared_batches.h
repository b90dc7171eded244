// shared_batches: one data loader per machine (MegaScale §3.4). Every rank on a machine constructs a
// MachineBatchFeed; local rank 0 also runs the producer, a thread that owns the machine's only
// DataLoader (the only one that opens and validates the token files) and writes each micro-batch
// of the whole data-parallel group (dp x B samples: exactly what dp loaders with set_dp_slice
// would read together, so the sample order stays the pure function of (seed, epoch, index)) into a
// POSIX shared-memory ring. Each rank that needs tokens copies its dp slice out of it; ranks that
// need none (middle pipeline stages) never read and are never waited for.
// Guarantees:
//  - next_batch returns, bit for bit, what DataLoader(...).set_dp_slice(dp_rank, dp).next_batch
//    would (the same paths, B, T, seed, shuffle), starting at the stream's beginning.
//  - The producer runs up to ring_slots micro-batches ahead (the next step's batches are prepared
//    while this one computes) and never overwrites a slot a rank that needs tokens has not read.
//  - The segment header names the format version, the job (a hash of the job key), the producer's
//    pid and the micro-batch sequence numbers. A consumer waiting longer than timeout_s, or seeing
//    the producer's process gone, stops with an ms::Error naming the loader (segment, pid).
//  - Nothing is left in /dev/shm: the name is unlinked as soon as every local rank has attached (the
//    mapping stays valid), on every error and destruction path, and by a SIGTERM / SIGINT handler
//    during the attach window; a segment left by an earlier crash (same name) is removed and
//    recreated by the producer, and a consumer never attaches to one whose creator is dead or whose
//    job or format differs.
//  - samples_read(): samples the producer read from the files (once per machine, not per rank).
// Cross-process synchronisation: atomics in the shared mapping, short sleeps while waiting.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ms {

struct MachineFeedOptions {
  std::vector<std::string> paths;  // training token files (as DataLoader)
  int B = 1, T = 1, vocab_size = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  std::string name = "data.train";  // labels errors
  int dp = 1, dp_rank = 0;          // this rank's data-parallel slice
  bool needs_tokens = true;         // false: this rank never calls next_batch
  int local_rank = 0, local_world_size = 1;
  std::string job_key;              // unique per job on the machine (run id, store, run directory)
  int ring_slots = 4;
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

  // This rank's B x T inputs and targets of the next micro-batch.
  void next_batch(int* inputs, int* targets);
  uint64_t num_samples() const;   // samples per epoch of the training stream
  uint64_t samples_read() const;  // by the machine's producer so far
  const std::string& segment() const { return segment_; }

 private:
  struct Header;
  void create_segment();
  void attach_segment();
  void producer_loop();
  [[noreturn]] void fail_loader(const std::string& why) const;
  Header* header() const;
  int* slot_inputs(uint64_t slot) const;

  MachineFeedOptions opt_;
  std::string segment_;
  size_t bytes_ = 0;
  size_t slot_ints_ = 0;  // dp*B*T
  void* map_ = nullptr;
  bool unlinked_ = false;
  uint64_t consumed_ = 0;  // micro-batches this rank has read
  std::thread producer_;
  std::atomic<bool> stop_{false};
};

}  // namespace ms
