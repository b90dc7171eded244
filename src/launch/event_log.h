// event_log: the driver's record of what happened to a job, one JSON object per line in
// <log_dir>/events.jsonl (launch-internal; docs/reliability.md "Event log"). Every line has
// `event` (job_start, executor_up, attempt_start, fault_injected, fault_detected, ranks_stopped,
// selfcheck, host_excluded, restart, resumed, loss_spike, stop_requested, job_end, ...), `t` (Unix
// time, seconds, the wall clock the test harness and the ranks' fault lines use) and `mono`
// (seconds since the job started, monotonic), plus the event's own fields.
// Guarantees: each line is written whole and flushed before log() returns (a driver killed right
// after still leaves every earlier event); the file is opened for append, so a second driver run
// on the same folder adds to it; log() never throws (a write error is reported once on stderr).
#pragma once
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace ms::launch {

class EventLog {
 public:
  // path empty: events are kept only in memory (recent()).
  explicit EventLog(const std::string& path);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Writes {"event": name, "t": ..., "mono": ..., fields...}; returns the line written.
  nlohmann::json log(const std::string& name, nlohmann::json fields = nlohmann::json::object());
  // Every event so far (the dashboard and the summary read them).
  nlohmann::json all() const;
  const std::string& path() const { return path_; }
  double mono_now() const;

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  bool failed_ = false;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  nlohmann::json events_ = nlohmann::json::array();
};

// Unix time in seconds (fractional).
double unix_seconds();

}  // namespace ms::launch
