// job_status: the live state of one launch as the dashboard shows it (launch-internal). It is fed
// from two sides: the launcher (each rank's process started / exited / killed, the launch's end)
// and the run's record files (obs/record_reader.h's RecordTail polls: headers give each rank's grid
// coordinates, step records its step, loss, tokens/s, MFU and per-segment milliseconds). From that
// it computes what the page and the scrapers see:
//  - status_json(): the job (world, step, loss, tokens/s, MFU, elapsed), the loss / tokens/s / MFU
//    history, every rank (coordinates, step, state, age of its last record), the rank x segment
//    heatmap over the last `window` steps (mean wall ms, ratio to the peers' median, the peers'
//    median ms and the colour floor: peers = the rank's pipeline stage) and the stragglers
//    (obs/straggler.h: compute segments in wall time with the waits, docs/observability.md).
//  - prometheus_text(): the same in Prometheus text format (HELP/TYPE lines; counters
//    megascale_steps_total, megascale_tokens_total, megascale_records_total only ever grow).
// Guarantees: thread-safe (one mutex; the HTTP threads read while the poller and the launcher
// write); memory stays bounded (per rank only the last steps are kept, the curves are thinned to
// at most kMaxHistory points); a record error is shown in the status, never thrown at a reader.
#pragma once
#include <chrono>
#include <cmath>  // NAN
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "obs/record_reader.h"  // RunRecords, RecordedStep
#include "obs/straggler.h"      // Straggler

namespace ms::launch {

class JobStatus {
 public:
  static constexpr size_t kMaxHistory = 2000;  // points of each curve sent to the page
  // world: ranks of the launch; window / margin: the straggler judgment (obs.straggler_*).
  JobStatus(int world, int window = kStragglerWindow, double margin = kStragglerMargin);

  // ---- the launcher's side ----
  void rank_started(int rank, int64_t pid);
  // wait_status as from waitpid: "exited" with its code, or "killed" with its signal.
  void rank_ended(int rank, int wait_status);
  // The launch is over (every rank reaped): `result` is the launcher's summary ("" = success).
  void launch_ended(int exit_code, const std::string& failure);

  // ---- the records' side ----
  // run.json found: the run's folder and records folder.
  void set_run(const std::string& out_dir, const std::string& records_dir);
  // One RecordTail::poll() result.
  void add_records(const RunRecords& fresh);
  // A failure to read the run (run.json or a record line); empty clears it.
  void set_error(const std::string& error);

  // ---- the driver's side (driver.h; absent for a single-machine launch) ----
  // The job's robustness state, shown as "driver" in status_json() and as metrics: `attempt`,
  // `faults`, `restarts` (numbers), `hosts` (each with index, name, state: active / spare /
  // excluded, and the reason), `events` (the latest event-log entries).
  void set_driver(nlohmann::json state);

  // ---- the views ----
  nlohmann::json status_json() const;
  std::string prometheus_text() const;

 private:
  struct Rank {
    int64_t pid = 0;
    bool have_header = false;
    RecordHeader header;
    std::string state = "starting";  // starting, running, exited, killed
    int exit_code = -1, signal = 0;
    int step = -1;
    double loss = NAN, tokens_per_s = NAN, mfu = NAN;
    bool loss_known = false;
    std::map<std::string, double> last_ms;  // the latest step's segment times
    std::vector<RecordedStep> recent;         // the last window steps (ascending)
    uint64_t records = 0;                   // records read (a counter)
    std::chrono::steady_clock::time_point last_record{};
  };
  struct StepPoint {  // one step of the job
    double loss = NAN, tokens_per_s = NAN, mfu = NAN;
    double tokens = 0;  // tokens_per_s x the step's wall time
  };
  struct Heatmap {
    std::vector<int> ranks;
    std::vector<std::string> segments;
    std::vector<std::vector<double>> ms, ratio;  // [rank row][segment]
    std::vector<std::vector<double>> peer_ms;    // the peers' (same stage) median of ms; NaN: no peer
    std::vector<std::vector<bool>> straggler;
    std::vector<Straggler> stragglers;
  };
  Heatmap heatmap_locked() const;
  // The newest step any rank finished (-1: none yet), its tokens/s and MFU, and the newest known loss.
  struct Latest {
    int step = -1;
    double loss = NAN, tokens_per_s = NAN, mfu = NAN;
  };
  Latest latest_locked() const;
  void add_step_locked(int rank, const RecordedStep& s);

  mutable std::mutex mu_;
  const int world_, window_;
  const double margin_;
  const std::chrono::steady_clock::time_point start_;
  const int64_t start_unix_ms_;
  std::vector<Rank> ranks_;
  std::map<int, StepPoint> steps_;  // by step number
  double tokens_total_ = 0;
  std::vector<std::string> segments_;  // every segment seen, in first-seen order
  std::string out_dir_, records_dir_, error_;
  bool ended_ = false;
  int exit_code_ = 0;
  std::string failure_;
  double end_elapsed_s_ = 0;
  nlohmann::json driver_;  // null without a driver
};

}  // namespace ms::launch
