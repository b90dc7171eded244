// job_summary: what a driven job's end reports (launch-internal; docs/reliability.md "Event log and
// summary"): the faults, restarts, steps repeated, excluded hosts, and the effective training time
// ratio ETTR = productive step time / wall time, where the productive step time counts every step
// once, at its latest execution (the time of executions a restart rolled back is lost time).
// Pure: unit-tested without processes.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ms::launch {

// Each step's wall time at its latest execution (the slowest rank's report of that attempt).
class StepTimes {
 public:
  void add(int step, int attempt, double ms);
  double productive_s() const;
  size_t steps() const { return ms_.size(); }

 private:
  std::map<int, double> ms_;
  std::map<int, int> attempt_;
};

struct FaultRecord {
  std::string kind;    // crash, nan, hang, traffic, heartbeat, executor, loss-spike
  std::string reason;  // in words, with the culprit
  int rank = -1, host = -1, step = 0;
};

struct ExcludedHost {
  int host = -1;
  std::string name, reason;
};

struct JobSummary {
  int exit_code = 0;
  std::string reason;
  std::vector<FaultRecord> faults;
  int restarts = 0, steps_repeated = 0, final_step = 0, final_world = 0;
  std::vector<ExcludedHost> excluded;
  double wall_s = 0, productive_s = 0;
  double ettr() const { return wall_s > 0 ? productive_s / wall_s : 0; }
  nlohmann::json to_json() const;
  // The lines the driver prints at the end ("summary: 1 fault(s), ... ETTR 0.87", one per fault).
  std::vector<std::string> lines() const;
};

}  // namespace ms::launch
