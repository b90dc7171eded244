// job_summary: see job_summary.h.
#include "launch/job_summary.h"

#include <algorithm>

#include <fmt/format.h>

namespace ms::launch {

void StepTimes::add(int step, int attempt, double ms) {
  if (!(ms > 0)) return;
  auto [it, fresh] = attempt_.try_emplace(step, attempt);
  if (fresh || it->second != attempt) {  // a new execution of the step replaces the rolled-back one
    ms_[step] = ms;
    it->second = attempt;
  } else {
    ms_[step] = std::max(ms_[step], ms);
  }
}

double StepTimes::productive_s() const {
  double total = 0;
  for (const auto& [step, ms] : ms_) total += ms;
  return total / 1000.0;
}

nlohmann::json JobSummary::to_json() const {
  nlohmann::json f = nlohmann::json::array(), x = nlohmann::json::array();
  for (const FaultRecord& r : faults)
    f.push_back({{"kind", r.kind}, {"reason", r.reason}, {"rank", r.rank}, {"host", r.host}, {"step", r.step}});
  for (const ExcludedHost& h : excluded) x.push_back({{"host", h.host}, {"name", h.name}, {"reason", h.reason}});
  return {{"exit_code", exit_code}, {"reason", reason}, {"faults", f}, {"restarts", restarts},
          {"steps_repeated", steps_repeated}, {"hosts_excluded", x}, {"final_step", final_step},
          {"final_world", final_world}, {"wall_s", wall_s}, {"productive_step_s", productive_s}, {"ettr", ettr()}};
}

std::vector<std::string> JobSummary::lines() const {
  std::vector<std::string> out = {fmt::format(
      "summary: {} fault(s), {} restart(s), {} step(s) repeated, {} host(s) excluded; wall {:.1f} s, productive step "
      "time {:.1f} s, ETTR {:.2f}", faults.size(), restarts, steps_repeated, excluded.size(), wall_s, productive_s, ettr())};
  for (size_t i = 0; i < faults.size(); i++)
    out.push_back(fmt::format("  fault {}: {} at step {}", i + 1, faults[i].reason, faults[i].step));
  for (const ExcludedHost& h : excluded) out.push_back(fmt::format("  excluded host {} ({}): {}", h.host, h.name, h.reason));
  return out;
}

}  // namespace ms::launch
