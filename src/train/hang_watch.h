// hang_watch: the training run's hang localization wiring (docs/observability.md "Hang localization").
// With obs.watchdog on, HangWatch starts the process's watchdog (obs/watchdog.h) before the world is
// created (MPI_Init_thread and the rendezvous are watched too) and installs the fatal comm-failure
// policy (comm/comm_fatal.h): a failed or hung op dumps <out_dir>/hang/rank-RRRRR.json and ends the
// rank with exit code 86 (MPI_Abort under MPI). SIGTERM / SIGINT reaching the run write a dump too
// (on_signal, from the run's signal thread). A run that ends normally removes its provisional dumps.
// With obs.watchdog off, nothing changes: a CommError reaches the caller (exit 1).
#pragma once
#include <string>

#include "comm/comm_env.h"  // CommEnv
#include "config/config.h"  // Config

namespace ms {

class RankGrid;

class HangWatch {
 public:
  HangWatch(const Config& cfg, const CommEnv& env);
  ~HangWatch();  // a normal end (return or an error that is not a comm failure): finish_clean
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // After the grid exists: the rank's identity for the dumps (unless the run recorder set it already).
  void attach(RankGrid& grid, const CommEnv& env, const Config& cfg);
  // A CommError that reached the training loop: dump and end (exit 86). Returns when the watchdog is off.
  void comm_failure(const std::string& what);
  // An error (not a comm failure) in the training loop of a run of world_size ranks: with more than
  // one rank, logs it, flushes the records and ends the rank at once with exit code 1 (tearing the
  // groups down with ops in flight would fail them: exit 86 and the message lost); returns otherwise.
  void error_after_start(const std::string& what, int world_size);
  // From the signal thread: SIGTERM / SIGINT reached the rank.
  static void on_signal(int sig);

 private:
  bool on_ = false;
};

}  // namespace ms
