// watchdog: the per-rank hang watchdog. A thread that every tick (0.5 s) scans the communication ring
// (obs/trace_sink.h) for ops still running past their deadline (TraceRecord::deadline_ns, set when an
// op starts: parallel.timeout_s) and writes this rank's hang dump (obs/hang_dump.h) into
// <out_dir>/hang/rank-RRRRR.json.
// Guarantees:
//  - An op past its deadline + grace (the engine's own timeout has the first word) ends the rank:
//    dump, one message on stderr naming op, group, seq and peer, then end_process(86) (the train app
//    passes MPI_Abort under MPI, else _exit: no unwinding into buffers an engine may still write, no
//    MPI_Finalize, no join of a blocked thread). fatal() does the same for a failed op (the comm
//    layer's failure handler, comm/comm_fatal.h) and never returns; a second caller waits for the first.
//  - Every waiting rank dumps before the first one ends (a launcher kills the others as soon as one
//    rank exits): a provisional "suspect" dump once an op has used half its time (removed when it
//    ends in time), and a "signal" dump on SIGTERM / SIGINT (on_signal, from the app's signal thread).
//    The first signal dump is kept: it shows the rank as it was when the job was being torn down.
//  - Blocking calls that are not ring ops (MPI_Init_thread, creating a group, joining the comm
//    threads at exit, MPI_Finalize) are made ring ops with a deadline by WatchedWait, so every wait
//    of the rank is bounded while the watchdog runs.
//  - The thread notes when it was not scheduled for longer than frozen_threshold (the process was
//    stopped or starved): the dump says for how long (frozen_ns).
//  - One watchdog per process; its thread runs until the process ends (it also guards the exit).
//    finish_clean() removes provisional dumps after a normal end.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "obs/hang_dump.h"   // HangDumpKind, kHangExitCode
#include "obs/trace_sink.h"  // TraceRecord

namespace ms {

struct WatchdogOptions {
  std::string out_dir;                       // dumps go to <out_dir>/hang/
  int rank = 0, world = 1;                   // until obs/rank_identity.h is set (before the grid exists)
  std::chrono::milliseconds grace{2000};     // act this long after an op's deadline
  std::chrono::milliseconds tick{500};       // scan period
  double suspect_fraction = 0.5;             // provisional dump once an op used this part of its time
  std::chrono::milliseconds frozen_threshold{2000};  // a tick later than this: the process was stopped
  void (*end_process)(int code) = nullptr;   // ends the process, never returns (default: _exit)
};

class Watchdog {
 public:
  // Starts the process's watchdog (once; a second call is an error). Its thread runs until exit.
  static Watchdog& start(WatchdogOptions opt);
  // The running watchdog, or nullptr.
  static Watchdog* get();

  // SIGTERM / SIGINT reached the rank: writes a "signal" dump (once). Returns at once.
  void on_signal(int sig);
  // Dump (unless a signal dump exists), message, end_process(86). `what` names op, group, seq, peer.
  [[noreturn]] void fatal(HangDumpKind kind, const std::string& what);
  // The run ended normally: provisional dumps (suspect, signal) are removed.
  void finish_clean();
  std::string dump_path() const;

  // The pure part of a tick (tests): ops running past deadline + grace / past the suspect point.
  static std::vector<TraceRecord> overdue(const std::vector<TraceRecord>& ring, int64_t now_ns, int64_t grace_ns);
  static std::vector<TraceRecord> suspects(const std::vector<TraceRecord>& ring, int64_t now_ns, double fraction);
  // "all_reduce on group 'dp[tp=0,pp=1]' (seq 41, peer 1) running 5.2 s, 2.0 s past its deadline".
  static std::string describe(const TraceRecord& r, int64_t now_ns);

 private:
  explicit Watchdog(WatchdogOptions opt);
  void loop();
  void tick();
  void write(HangDumpKind kind, const std::string& reason, std::vector<TraceRecord> stuck);  // m_ held
  std::string rank_text() const;

  WatchdogOptions opt_;
  std::mutex m_;  // dumps and the flags below
  bool suspect_written_ = false, signal_written_ = false;
  std::atomic<bool> ending_{false};
  std::atomic<int64_t> last_tick_ns_{0};
  int64_t frozen_ns_ = 0, frozen_end_ns_ = 0;  // m_
};

// A blocking call that is not a comm op (what: a string literal, e.g. "MPI_Init_thread"), watched as
// a running op of `group` with a deadline `limit` from now: the watchdog ends the rank if it still
// runs at deadline + grace, and lists it among a dump's stuck ops. Kept apart from the comm ring
// (traces and record files show only real ops). Ends on destruction.
class WatchedWait {
 public:
  WatchedWait(std::string_view what, std::string group, std::chrono::milliseconds limit);
  ~WatchedWait();
  WatchedWait(const WatchedWait&) = delete;
  WatchedWait& operator=(const WatchedWait&) = delete;

 private:
  uint64_t id_ = 0;
};
// The WatchedWaits in progress, as records (state running, deadline set).
std::vector<TraceRecord> watched_waits();

}  // namespace ms
