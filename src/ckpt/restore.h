// restore: train.resume. Picks the checkpoint (auto: the one `latest` names, then older step
// folders, newest first; PATH: exactly that folder), checks it, loads it into the parallel model under
// this run's layout (any DP x TP x PP: tensors are assembled whole and cut again), or starts fresh.
// Checks, before anything is installed: rank 0 reads the manifest (format version, model shape
// against this config with a field-by-field difference, every tensor covered exactly once, every
// listed file present with its size); the readers verify each file's XXH64 before using a byte,
// the files a reader needs read and verified on all of its machine's cores at once.
// A checkpoint that fails anywhere is named with the reason and skipped (auto) or is an error
// (PATH), on every rank; none is loaded partially. A checkpoint of another data stream
// (ckpt/data_stream.h: data files, seed, sequence length, sequences per step, shuffle) is an error
// for PATH and a warning naming what differs under auto (resumed all the same).
// Recovery read (MegaScale §4.4): in each data-parallel group only DP rank 0 reads the files its
// part needs, broadcasts the weights to the others and sends each its own ZeRO ranges of the Adam
// moments (checkpoint.broadcast_restore; off: every rank reads). Every rank of the job calls it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/checkpointer.h"  // CheckpointRank
#include "ckpt/manifest.h"      // Manifest
#include "ckpt/storage.h"       // CheckpointStorage
#include "config/config.h"      // Config

namespace ms {

class Communicator;
class ParallelModel;

struct RestoreResult {
  bool restored = false;
  std::string path;            // the checkpoint folder loaded
  Manifest manifest;           // its manifest (step, data position, tokens)
  int files_read = 0;          // by this rank
  uint64_t bytes_read = 0;     // by this rank
  std::vector<std::string> files;  // the files this rank read
  double seconds = 0;          // the whole restore on this rank, of which:
  double read_seconds = 0;     //   reading, verifying and assembling (readers)
  double agree_seconds = 0;    //   the agreement that every reader succeeded (waiting for the slowest)
  double send_seconds = 0;     //   the reader's broadcast / sends to its data-parallel group
};

// storage: checkpoint.dir's storage (auto); a PATH in train.resume is read where it is.
// log: rank 0's messages (checkpoints skipped and why). world and dp may be null (one process).
RestoreResult restore_checkpoint(const Config& cfg, ParallelModel& model, const CheckpointStorage& storage,
                                 Communicator* world, Communicator* dp, CheckpointRank who,
                                 const std::function<void(const std::string&)>& log);

// The step folders of a checkpoint root, newest first, `latest`'s target first when it exists
// (a `latest` naming a missing folder is reported through `note`).
std::vector<std::string> checkpoint_candidates(const CheckpointStorage& storage,
                                               const std::function<void(const std::string&)>& note);
// Rank 0's checks of one folder (see above); throws naming the folder, file and field. text: the
// manifest's JSON as read (to pass on without reading it again).
Manifest check_checkpoint(const CheckpointStorage& storage, const std::string& dir, const Config& cfg,
                          std::string* text = nullptr);

}  // namespace ms
