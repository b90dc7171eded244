// checkpointer: the two-stage asynchronous save (MegaScale §4.4, CheckFreq's snapshot/persist).
// Stage 1 (save(), on the training thread at a step boundary, every rank at the same step) hands the
// state this rank owns (ParallelModel::state_runs: fp32 master weights and both Adam moments of its ZeRO
// pieces or TP part) to a copier thread that copies it into a host snapshot buffer allocated once,
// while the next step's forward and backward run (CheckFreq): the state changes only in the next
// optimizer update, which calls finish_stage1() first. State in GPU memory (StateRun::device) is
// copied by the copier on a CUDA stream of its own into page-locked snapshot buffers, after an
// event recorded on the compute stream at save(): the training thread only records the event, and
// the GPU copies run beside the next step's kernels. Two snapshot buffers (the second allocated
// when first needed): a save may queue behind one still being persisted; a save finding both taken
// on any rank (agreed at the step boundary, at_boundary()) is skipped with a message, never waited
// for in the step; drain() (before a final save and at the end) waits outside steps.
// Stage 2 (a background writer thread at low CPU and I/O priority, not pinned to the training
// thread's CPU): refuses a snapshot holding NaN/Inf, writes the rank's safetensors file into the
// save's temporary folder (".tmp-step-<N>-<nonce>", fsynced), then a marker with the file's record
// (size, XXH64, entries) or the reason it failed. Rank 0's writer then waits for every rank's marker
// (checkpoint.timeout_s), writes manifest.json, renames the folder to "step-<N>" and only then
// replaces the `latest` pointer; it applies retention (keep_last newest plus every keep_every-th
// step; never the newest). A save that fails anywhere is never published: `latest` keeps naming
// the previous complete checkpoint.
// A failure needs no disk space to travel (a full disk cannot take a failure marker either): rank 0
// uses its own outcome as it holds it, and every rank's writer failure is announced to all ranks in
// the step boundary's agreement (at_boundary(), one all-reduce that also carries the caller's
// flags), which ends rank 0's wait for that save's markers.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>  // std::pair
#include <vector>

#include "base/aligned.h"        // AlignedBuffer
#include "ckpt/manifest.h"       // Manifest, ManifestEntry
#include "ckpt/storage.h"        // CheckpointStorage
#include "config/config.h"       // Config
#include "data/dataloader.h"     // DataLoader::Position
#include "parallel/parallel_model.h"  // ParallelModel, StateRun

namespace ms {

class Communicator;

// Where this rank sits: world rank and size, and its grid coordinates.
struct CheckpointRank {
  int rank = 0, world = 1;
  int dp = 0, tp = 0, pp = 0;
};

struct SaveOutcome {
  int step = 0;
  bool ok = false;
  bool whole = false;       // rank 0: the outcome of the whole save (published or not); others: their file
  std::string message;      // what was published, or why not
  double seconds = 0;       // stage 2 duration
  uint64_t bytes = 0;       // this rank's file
};

struct Stage1Stats {
  double seconds = 0;         // the whole stall of the training thread
  double waited_seconds = 0;  // of which waiting for the previous save (checkpoint.async=false only)
  uint64_t bytes = 0;         // copied into the snapshot buffer
  bool skipped = false;       // not saved: the previous save (step in_flight) is still being written
  int in_flight = 0;
};

class Checkpointer {
 public:
  // Every rank constructs it (collective over world, which may be nullptr for one process): rank 0
  // picks this run's nonce for temporary folders and removes this format's temporaries left by
  // earlier runs (".tmp-step-<8 digits>-<16 hex digits>" folders and `latest`'s "latest.tmp.<pid>";
  // nothing else). resumed: the checkpoint this run continues (its lineage is kept; else a fresh
  // one is picked): retention removes only step folders of this lineage, never another job's.
  Checkpointer(const Config& cfg, ParallelModel& model, CheckpointStorage& storage, Communicator* world,
               CheckpointRank who, const Manifest* resumed = nullptr);
  // Finishes a save in flight; when unwinding after an error, rank 0 gives up waiting for the other
  // ranks (nothing unfinished is ever published either way).
  ~Checkpointer();

  // Every rank at every step boundary, before save() (a collective over world): one all-reduce of
  // the caller's three flags (returned OR-ed over the ranks) together with each rank's writer state:
  // failures not yet announced (rank 0 stops waiting for that save's markers) and whether a save is
  // still in flight anywhere (then the next save() skips).
  std::array<bool, 3> at_boundary(bool a, bool b, bool c = false);
  // Every rank (collective): waits, outside any step, until no rank's writer has work left,
  // announcing failures as they happen (a full disk never makes rank 0 wait checkpoint.timeout_s).
  void drain();
  // Stage 1 at the boundary after `step` optimizer steps (every rank; after at_boundary() or
  // drain()); data: the stream position of the next step; tokens: consumed so far; loss: the last
  // step's training loss (for the manifest). Skipped (returns skipped) while the previous save is
  // in flight on any rank.
  Stage1Stats save(int step, DataLoader::Position data, uint64_t tokens, float loss);
  // Before the state changes (the next optimizer update): waits for a stage-1 copy still running;
  // returns the seconds waited (0 when none runs).
  double finish_stage1();
  // Blocks until this rank's writer has finished everything handed to it (rank 0 may wait for
  // other ranks' markers: use drain() on every rank instead where they may have failed).
  void wait_idle();
  // Outcomes finished since the last call.
  std::vector<SaveOutcome> take_outcomes();

 private:
  struct Job {
    int step = 0;
    DataLoader::Position data;
    uint64_t tokens = 0;
    float loss = 0;
    double copy_seconds = 0;  // the stage-1 copy (copier thread)
    int64_t seq = 0;          // the save's number in this run (the same on every rank)
    int buf = 0;              // its snapshot buffer
    bool copied = false;      // stage 1 done
    std::vector<StateRun> runs;  // what the copier copies
    std::shared_ptr<void> ready;  // GPU runs: an event after the update that wrote them (a cudaEvent_t)
  };
  struct Slot {  // one state run's place in the snapshot buffer and in the file
    int chunk = 0;
    size_t spec_index = 0;
    std::string tensor;
    std::vector<int64_t> shape;  // in the file
    int parts = 1, part = 0;
    uint64_t lo = 0, hi = 0;
    size_t at = 0;               // offset of its param array in buf_ (then m at +n, v at +2n)
  };
  void copier_main();
  void writer_main();
  // this rank's file(s) and marker, from snapshot b
  SaveOutcome write_own(const Job& job, const float* b, std::vector<ManifestFile>& recs);
  // rank 0: manifest, publish, latest, retention; own_files: its own file records (no marker read)
  SaveOutcome commit(const Job& job, const SaveOutcome& own, std::vector<ManifestFile> own_files);
  std::string wait_for_markers(const Job& job, Manifest& m);  // rank 0: the other ranks' records, or the problem
  void apply_retention(int newest);
  std::string tmp_dir(int step) const;

  Config cfg_;
  ParallelModel& model_;
  CheckpointStorage& storage_;
  CheckpointRank who_;
  std::string nonce_;
  std::vector<Slot> slots_;
  AlignedBuffer<float> bufs_[2];  // page-locked (pin_host_memory) when the state is on a GPU
  bool gpu_state_ = false;         // some state run lives in GPU memory
  Stream copy_stream_{};           // the copier's device copies (its thread only)
  size_t buf_elems_ = 1;
  Manifest base_;  // what every manifest shares (tensors, layout, config, model hash)

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<Job> jobs_;                  // saves handed over and not finished, oldest first (at most 2)
  bool buf_used_[2] = {false, false};
  std::atomic<bool> abandon_{false};  // unwinding: rank 0 stops waiting for other ranks' markers
  Communicator* world_ = nullptr;         // the boundary agreements (training thread only)
  // Failures travel by the parity of the save's number: at most two saves are in flight, and a
  // rank's failure is announced before a third can start (it has no free buffer until then).
  bool unannounced_[2] = {false, false};  // this rank's writer failed a save of this parity
  std::atomic<int64_t> announced_[2] = {-1, -1};  // rank 0: the save (seq) whose failure was announced
  bool full_anywhere_ = false;            // agreed at the last boundary: no free buffer on some rank
  bool work_anywhere_ = false;            // agreed at the last boundary: a save in flight on some rank
  int last_save_ = 0;                     // the step of the last save started (the same on every rank)
  int64_t next_seq_ = 0;
  std::vector<SaveOutcome> outcomes_;
  std::thread copier_, writer_;
};

// The step folder's name: "step-00000042".
std::string checkpoint_dir_name(int step);
// Parses a step folder's name; -1 if it is not one.
int checkpoint_step_of(const std::string& name);
// Whether a name in the checkpoint folder is a temporary this format writes (see Checkpointer).
bool is_own_temporary(const std::string& name);

}  // namespace ms
