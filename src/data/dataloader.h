// dataloader: batches of (inputs, targets) from token files, in a reproducible, resumable order.
// TokenDataset opens a list of sources — llm.c shards or Megatron-LM prefixes — expanding each
// path (a file, a directory, or a glob; directory and glob matches are sorted by name) and
// validating every file up front (structure and token ids < V), so bad data fails before training.
// A path ending in ".bin" with a sibling ".idx" (or a prefix with both) is Megatron; any other file
// must be an llm.c shard. Each source is one token stream; a *sample* is T+1 consecutive tokens at
// offset k*T of one source (inputs = first T, targets = last T), never crossing sources; sample ids
// number the samples of source 0, then source 1, ...
// DataLoader delivers B samples per batch. The sample at (epoch e, index i) is
// perm_{seed,e}(i): a Fisher–Yates shuffle of all sample ids driven by a splitmix64 stream seeded
// from (seed, e), or the identity when shuffle is off. Epochs roll over automatically, batches may
// straddle them, and the stream of samples does not depend on B. position() / set_position() give
// exact resume. A background thread prepares the next batch while the caller computes; its output
// is identical to the synchronous path (prefetch=false).
#pragma once
#include <condition_variable>  // std::condition_variable
#include <cstdint>             // uint64_t
#include <exception>           // std::exception_ptr
#include <memory>              // std::unique_ptr
#include <atomic>
#include <mutex>               // std::mutex
#include <string>
#include <thread>              // std::thread
#include <vector>

namespace ms {

// One token stream (an llm.c shard or a Megatron dataset).
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual const std::string& path() const = 0;
  virtual const char* kind() const = 0;  // "llm.c" or "megatron"
  virtual uint64_t num_tokens() const = 0;
  virtual void read(uint64_t offset, size_t count, int* out) const = 0;  // bounds-checked
};

// Expands `paths` into source files. `what` names the setting in errors ("data.train: no files
// match 'data/x*.bin'"). Megatron .bin/.idx pairs are returned once, as their .bin path.
std::vector<std::string> expand_data_paths(const std::vector<std::string>& paths,
                                           const std::string& what);

class TokenDataset {
 public:
  // Opens and validates every source (throws ms::Error naming the file and the reason).
  TokenDataset(const std::vector<std::string>& paths, int vocab_size, const std::string& what = "data");
  ~TokenDataset();
  TokenDataset(TokenDataset&&) noexcept;

  size_t num_sources() const { return sources_.size(); }
  const TokenSource& source(size_t i) const { return *sources_[i]; }
  uint64_t num_tokens() const;
  uint64_t num_samples(int T) const;  // sum over sources of floor((n - 1) / T)
  // Sample `id` for length T: inputs[t] = stream[k*T + t], targets[t] = stream[k*T + t + 1].
  void read_sample(uint64_t id, int T, int* inputs, int* targets) const;
  // Samples read from the files so far (read_sample calls; T+1 tokens each). Safe to read from
  // any thread while another reads samples (the prefetch worker, the shared feed's producer).
  uint64_t samples_read() const { return samples_read_.load(std::memory_order_relaxed); }

 private:
  std::vector<std::unique_ptr<TokenSource>> sources_;
  mutable std::atomic<uint64_t> samples_read_{0};
};

class DataLoader {
 public:
  struct Position {
    uint64_t epoch = 0;
    uint64_t index = 0;  // next sample within the epoch, in [0, num_samples())
    bool operator==(const Position&) const = default;
  };

  // `name` labels errors (e.g. "data.train"); prefetch=false runs synchronously (same output).
  DataLoader(std::vector<std::string> paths, int B, int T, int vocab_size, uint64_t seed, bool shuffle,
             std::string name = "data", bool prefetch = true);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Fills inputs[B*T] and targets[B*T] (row b = sample b) and advances by B samples (by dp*B
  // with a data-parallel slice set).
  void next_batch(int* inputs, int* targets);
  // Data-parallel slice: the sample stream is cut into consecutive groups of dp*B samples and
  // this loader returns the dp_rank-th B of each group, so the dp ranks of one step together read
  // exactly the samples one loader without a slice would read in `dp` consecutive batches.
  // Positions stay positions in the shared stream. Call before the first next_batch (restarts
  // prefetch). (Not to be confused with llm.c token shard files or ZeRO's optimizer shards.)
  void set_dp_slice(int dp_rank, int dp);
  uint64_t num_samples() const { return num_samples_; }  // samples per epoch
  Position position() const;                             // of the next batch to be returned
  void set_position(Position p);                         // exact resume (index < num_samples())
  const TokenDataset& dataset() const { return dataset_; }
  int B() const { return B_; }
  int T() const { return T_; }

  // The sample id at (epoch, index): a pure function of (seed, shuffle, epoch, index). Builds the
  // epoch's permutation on each call (O(num_samples)): for tests and tools, not the hot path.
  uint64_t sample_at(uint64_t epoch, uint64_t index) const;

 private:
  struct Batch {
    std::vector<int> inputs, targets;
    Position start, end;
  };
  void fill(Batch& b, Position start);  // reads this rank's B samples of the group at start; sets b.end
  void advance(Position& p, uint64_t n) const;  // n samples further in the stream
  const std::vector<uint64_t>& perm_for(uint64_t epoch);  // worker-side cached permutation
  void worker_loop();
  void stop_worker();

  TokenDataset dataset_;
  int B_, T_;
  std::atomic<int> dp_rank_{0}, dp_{1};  // the data-parallel slice; read by the prefetch worker
  uint64_t seed_;
  bool shuffle_;
  std::string name_;
  bool prefetch_;
  uint64_t num_samples_ = 0;

  uint64_t perm_epoch_ = UINT64_MAX;  // epoch of perm_ (touched only by the filling thread)
  std::vector<uint64_t> perm_;

  // Shared state (guarded by mu_).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Position consumer_pos_;   // position of the next batch handed to the caller
  Position producer_pos_;   // where the worker starts its next batch
  uint64_t generation_ = 0; // bumped by set_position; stale work is discarded
  bool slot_full_ = false;
  bool stop_ = false;
  Batch slot_, scratch_;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace ms
