// anomaly: the driver's detectors of a job that is alive but not healthy (launch-internal;
// docs/reliability.md "Detection"). Each is fed from the executors' heartbeats and asked at every
// wake-up whether it fires; each returns the reason in words ("no step completed for 31.0 s (limit
// 30.0 s: 10 x the median step time 3.1 s)"). Pure logic on given times: unit-tested without processes.
//  - ProgressWatch: no step progress for max(min_s, factor x median step time); before the
//    attempt's first step the limit is startup_s (start-up, checkpoint load, first step).
//  - TrafficWatch: the ranks moved no collective / p2p bytes for `timeout_s` once the attempt has
//    completed a step (a job of one rank has no traffic and is not judged).
//  - LossWatch: a non-finite loss, or a spike: z = (loss - mean) / std over the last `window`
//    losses above `z_limit` (judged once `window` losses are known; std floored at 1e-3 x |mean|).
//  - LossSpikeAction: what a spike does (`--loss-spike-action`, parsed once at the command line):
//    warn (logged) or restart (a fault, recovered like any other).
//  - LoopClock: the time these detectors and the heartbeat ages are judged on. It stands still
//    while the driver's loop does not run (the driver was SIGSTOPped, or a call blocked): a gap
//    between two ticks longer than `max_gap` counts as `max_gap`, so a driver that could not read
//    does not blame the hosts (or the job) for its own absence. Monotonic.
#pragma once
#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace ms::launch {

using DriverClock = std::chrono::steady_clock;

struct StallOptions {
  double factor = 10;      // x the median step time
  double min_s = 30;       // never less than this
  double startup_s = 300;  // until the attempt's first step
};

class ProgressWatch {
 public:
  explicit ProgressWatch(StallOptions opt = {}) : opt_(opt) {}
  // A new attempt started now: forget the last progress (the step times are kept: same job).
  void start(DriverClock::time_point now);
  // A step completed (any rank's count of completed steps grew); step_ms: its wall time if known.
  void progress(DriverClock::time_point now, double step_ms);
  // The limit now in force (seconds).
  double limit_s() const;
  std::optional<std::string> check(DriverClock::time_point now) const;
  double median_step_ms() const;
  bool started_steps() const { return steps_this_attempt_ > 0; }

 private:
  StallOptions opt_;
  DriverClock::time_point last_{};
  int steps_this_attempt_ = 0;
  std::deque<double> step_ms_;  // the last 50
};

class TrafficWatch {
 public:
  explicit TrafficWatch(double timeout_s = 60) : timeout_s_(timeout_s) {}
  void start(DriverClock::time_point now);
  // Bytes moved since the last beat (all hosts); judged only once `judged` (a step completed, world > 1).
  void add(DriverClock::time_point now, int64_t bytes, bool judged);
  std::optional<std::string> check(DriverClock::time_point now) const;

 private:
  double timeout_s_;
  bool judged_ = false;
  DriverClock::time_point last_traffic_{};
};

class LoopClock {
 public:
  explicit LoopClock(DriverClock::duration max_gap) : max_gap_(max_gap) {}
  // Once per loop iteration with the real time; returns the loop's time now.
  DriverClock::time_point tick(DriverClock::time_point real);
  // The loop's time at the last tick.
  DriverClock::time_point now() const { return now_; }
  // The real time not counted so far.
  DriverClock::duration skipped() const { return skipped_; }

 private:
  DriverClock::duration max_gap_;
  DriverClock::duration skipped_{};
  DriverClock::time_point last_real_{}, now_{};
};

enum class LossSpikeAction { kWarn, kRestart };
// "warn" or "restart"; else ms::Error "--loss-spike-action must be warn or restart, got 'X'".
LossSpikeAction parse_loss_spike_action(const std::string& text);

class LossWatch {
 public:
  LossWatch(int window = 20, double z_limit = 6) : window_(window), z_limit_(z_limit) {}
  // The loss of `step` (finite or not). Returns the anomaly, if any: a non-finite loss always, a
  // spike when z_limit > 0. A spike's loss still joins the window.
  std::optional<std::string> add(int step, double loss, bool finite);
  void reset() { losses_.clear(); }

 private:
  int window_;
  double z_limit_;
  std::deque<double> losses_;
};

}  // namespace ms::launch
