// dir_lock: one job per run folder. A DirLock holds an exclusive flock(2) on a folder itself (no
// lock file is created: nothing is added to the folder) for its own lifetime; the kernel drops the
// lock when the process ends, however it ends (SIGKILL included), so a dead run never leaves it
// stuck. A second job gets an ms::Error naming the folder, its config key and the holder's pid
// (from /proc/locks, where the kernel lists it).
// lock_run_dirs() is what `train` calls on every rank: rank 0 locks train.out_dir and the
// checkpoint folder (checkpoint.dir, default <train.out_dir>/checkpoints), creating them, and every
// rank gets the same error before anything is written there.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"  // Config

namespace ms {

class Communicator;

class DirLock {
 public:
  // Creates `dir` (with parents) if needed and locks it; `key` names it in errors ("train.out_dir").
  // A lock held by another process is waited for up to `wait_s` seconds (a restarted job's previous
  // rank 0 may still be exiting), then an error.
  DirLock(const std::string& dir, const std::string& key, double wait_s = 2.0);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int fd_ = -1;
};

// Rank 0's locks of the run's folders (empty on other ranks); collective over world (may be null).
std::vector<std::unique_ptr<DirLock>> lock_run_dirs(const Config& cfg, Communicator* world, int rank);

}  // namespace ms
