// run_recorder: the always-on record file of one rank (docs/observability.md "Record files"):
// <train.out_dir>/records/rank-RRRRR.jsonl, JSON lines: a header, then spans and collectives from
// the trace sink (obs/trace_sink.h), steps, clock re-alignments and events, times on the aligned
// clock (obs/aligned_clock.h).
// Guarantees:
//  - Recording never blocks training on I/O: a background thread appends what finished since its
//    last pass every flush_ms (records that are still running are written once they end); steps
//    and events are queued in memory. The destructor (and flush()) write everything left.
//  - Each pass writes whole lines and flushes them, so a reader of a growing file sees complete
//    lines plus at most one partial last line. A record overwritten in the ring before a pass
//    could collect it is counted (the `lost` field of the next step line), never invented.
//  - A write error (disk full) stops recording with one warning; training goes on.
//  - One recorder per process at a time; record_event() reaches it from any layer.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "obs/aligned_clock.h"  // ClockOffset
#include "obs/trace_sink.h"     // TraceRecord

namespace ms {

class RunRecorder {
 public:
  // Creates path's folder, writes the header (rank_identity(), the clock offset, format 1) and
  // starts the flush thread. Throws ms::Error naming the path when the file cannot be created.
  RunRecorder(const std::string& path, int flush_ms);
  ~RunRecorder();  // writes what is left, joins the thread
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  const std::string& path() const { return path_; }
  // A "step" line; `fields` holds step, t0, t1 (aligned ns), loss, lr, tokens_per_s, mfu, mfu_gemm, ms.
  void step(nlohmann::json fields);
  // An "event" line at the current time (step: the trace sink's current step).
  void event(std::string_view name, std::string_view detail);
  // A "clock" line: the offset in force from `step` on.
  void clock(int step, ClockOffset o);
  // Writes everything finished so far, now, on the caller's thread.
  void flush();

 private:
  void run();
  void write_locked(std::vector<std::string>& queued);  // io_mu_ held
  std::string path_;
  int flush_ms_;
  std::FILE* file_ = nullptr;
  bool failed_ = false;
  std::mutex io_mu_;  // the file and the ring cursors
  uint64_t next_[2] = {0, 0};
  std::vector<uint64_t> pending_[2];
  std::vector<TraceRecord> batch_;
  uint64_t lost_ = 0;
  std::mutex q_mu_;  // queued lines and the stop flag
  std::condition_variable cv_;
  std::vector<std::string> queued_;
  bool stop_ = false;
  std::thread thread_;
};

// An "event" line in the active recorder, if any (checkpoints, faults, errors).
void record_event(std::string_view name, std::string_view detail);
// The active recorder's flush(), if any (before a process ends abruptly).
void flush_active_recorder();

}  // namespace ms
