// recovery_policy: see recovery_policy.h.
#include "launch/recovery_policy.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "launch/signal_forwarding.h"  // signal_description

namespace ms::launch {

bool is_storage_segment(const std::string& segment) { return segment.rfind("checkpoint", 0) == 0; }

namespace {
// The segment named in a diagnosis' words ("...; its current segment: checkpoint-stage1"), if any.
std::string segment_in_words(const std::string& why) {
  static const std::string key = "its current segment: ";
  const size_t at = why.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size(), end = why.find_first_of(";) ", from);
  return why.substr(from, end == std::string::npos ? std::string::npos : end - from);
}
}  // namespace

Blame blame_hang(const std::vector<HangCulprit>& culprits, const std::vector<int>& active_hosts) {
  Blame b;
  std::vector<std::string> storage;
  std::vector<std::pair<int, std::string>> hosts;  // (host, reason), first culprit per host
  for (const HangCulprit& c : culprits) {
    const std::string seg = !c.segment.empty() ? c.segment : segment_in_words(c.why);
    // A frozen process (stopped or starved: diagnose's "was not scheduled") is its host's, wherever it is.
    const bool frozen = c.why.find("was not scheduled") != std::string::npos;
    if (is_storage_segment(seg) && !frozen) {
      storage.push_back(fmt::format("rank {} was stuck in {}", c.rank, seg));
      continue;
    }
    if (c.host < 0) continue;
    if (std::none_of(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == c.host; }))
      hosts.emplace_back(c.host, fmt::format("hang localization named rank {}: {}", c.rank, c.why));
  }
  std::set<int> named;
  for (const auto& h : hosts) named.insert(h.first);
  const bool every_host = active_hosts.size() >= 2 &&
                          std::all_of(active_hosts.begin(), active_hosts.end(), [&](int h) { return named.count(h); });
  if (!storage.empty())
    b.note = fmt::format("{}: a storage fault (the checkpoint folder's disk or file system), not a host fault; "
                         "no host excluded for it", fmt::join(storage, ", "));
  if (every_host) {
    b.cause = "shared";
    b.note += fmt::format("{}culprits on every host ({}): a shared cause, not a host fault; no host excluded",
                          b.note.empty() ? "" : "; ", fmt::join(named, ", "));
  } else if (!hosts.empty()) {
    b.cause = "host";
    b.exclude = hosts;
  } else if (!storage.empty()) {
    b.cause = "storage";
  }
  return b;
}

Blame blame_selfchecks(const std::vector<HostVerdict>& verdicts) {
  Blame b;
  std::vector<const HostVerdict*> failed;
  for (const HostVerdict& v : verdicts)
    if (!v.ok) failed.push_back(&v);
  if (failed.empty()) return b;
  const std::string& kind = failed[0]->kind;
  const bool same = std::all_of(failed.begin(), failed.end(), [&](const HostVerdict* v) { return v->kind == kind; });
  const bool could_not_check = kind == "not run" || kind == "no report";
  if (failed.size() == verdicts.size() && same && (verdicts.size() >= 2 || could_not_check)) {
    b.cause = "shared";
    b.note = fmt::format("every host's self-check failed the same way ({}; e.g. host {}: {}): a shared cause (the "
                         "store, the network, the software), not a host fault; no host excluded",
                         kind, failed[0]->host, failed[0]->why);
    return b;
  }
  b.cause = "host";
  for (const HostVerdict* v : failed) b.exclude.emplace_back(v->host, "self-check: " + v->why);
  return b;
}

Blame blame_heartbeats(const std::vector<std::pair<int, double>>& ages, double timeout_s) {
  Blame b;
  std::vector<std::pair<int, double>> silent;
  for (const auto& [h, age] : ages)
    if (age > timeout_s) silent.emplace_back(h, age);
  if (silent.empty()) return b;
  if (ages.size() >= 2 && silent.size() == ages.size()) {
    b.cause = "shared";
    b.note = fmt::format("no heartbeat from any of the {} host(s) for {:.1f} s: a shared cause (the driver's side, "
                         "the network), not a host fault; no host excluded", ages.size(), silent[0].second);
    return b;
  }
  b.cause = "host";
  for (const auto& [h, age] : silent) b.exclude.emplace_back(h, fmt::format("no heartbeat for {:.1f} s", age));
  return b;
}

std::optional<FailedRank> root_cause(const std::vector<FailedRank>& failed) {
  // Killed by a signal, then an error exit, then a communication failure (exit 86, obs/watchdog.h).
  auto order = [](const RankBeat& r) { return r.state == "killed" ? 0 : r.exit_code != 86 ? 1 : 2; };
  std::optional<FailedRank> best;
  for (const FailedRank& f : failed)
    if (!best || order(f.rank) < order(best->rank)) best = f;
  return best;
}

FaultRecord describe_rank_failure(const FailedRank& f, const std::string& last_error) {
  const RankBeat& r = f.rank;
  FaultRecord out;
  out.kind = "crash";
  out.rank = r.rank;
  out.host = f.host;
  out.reason = r.state == "killed"
                   ? fmt::format("rank {} killed by signal {} ({})", r.rank, r.signal, signal_description(r.signal))
                   : fmt::format("rank {} exited with code {}", r.rank, r.exit_code);
  if (!last_error.empty()) {
    out.reason += ": " + last_error;
    if (last_error.find("non-finite") != std::string::npos || last_error.find("not finite") != std::string::npos)
      out.kind = "nan";
  }
  return out;
}

AttemptPlan plan_attempt(const std::vector<int>& healthy, int wanted) {
  AttemptPlan p;
  const int use = std::min<int>(wanted, (int)healthy.size());
  p.hosts.assign(healthy.begin(), healthy.begin() + use);
  p.shrunk = use < wanted;
  return p;
}

std::optional<std::string> RetryPolicy::after_fault(const FaultRecord& f, int restarts, bool startup_error) {
  // The same failure again: the job got no further than the last failure's step (steps are known
  // from the records, a little behind the ranks, which errs towards "the same").
  same_count_ = last_step_ && f.step <= *last_step_ ? same_count_ + 1 : 1;
  last_step_ = f.step;
  if (startup_error)
    return fmt::format("every rank stopped with an error before the first step ({}); an error at start-up "
                       "(config, data, checkpoint) is not retried", f.reason);
  if (same_count_ >= same_limit_)
    return fmt::format("{} failures in a row without getting past step {} (last: {}); not restarting "
                       "(--same-failure-limit {})", same_count_, f.step, f.reason, same_limit_);
  if (restarts >= max_restarts_) return fmt::format("{} restarts (--max-restarts); last fault: {}", restarts, f.reason);
  return std::nullopt;
}

// ---- RecoveryPolicy -----------------------------------------------------------------------------

RecoveryPolicy::RecoveryPolicy(PolicyOptions opt)
    : opt_(std::move(opt)), retry_(opt_.same_failure_limit, opt_.max_restarts) {
  wanted_ = host_count() - opt_.spare_hosts;
}

std::string RecoveryPolicy::excluded_reason(int host) const {
  const auto it = excluded_.find(host);
  return it == excluded_.end() ? "" : it->second;
}

bool RecoveryPolicy::active(int host) const { return std::find(active_.begin(), active_.end(), host) != active_.end(); }

bool RecoveryPolicy::exclude(int host, const std::string& why) { return excluded_.emplace(host, why).second; }

void RecoveryPolicy::take(Blame& b) {
  std::vector<std::pair<int, std::string>> fresh;
  for (auto& [host, why] : b.exclude)
    if (exclude(host, why)) fresh.emplace_back(host, why);
  b.exclude = std::move(fresh);
}

AttemptDecision RecoveryPolicy::next_attempt(const std::vector<int>& available) {
  AttemptDecision d;
  std::vector<int> healthy;
  for (int h : available)
    if (!excluded(h)) healthy.push_back(h);
  if (healthy.empty()) {
    d.end = true;
    d.reason = "no healthy host left";
    return d;
  }
  const AttemptPlan plan = plan_attempt(healthy, wanted_);
  d.hosts = plan.hosts;
  d.shrunk = plan.shrunk;
  d.first_shrink = plan.shrunk && !shrink_logged_;
  shrink_logged_ = shrink_logged_ || plan.shrunk;
  active_ = plan.hosts;
  first_failure_s_.reset();
  return d;
}

RunningVerdict RecoveryPolicy::judge_running(const RunningView& v, double heartbeat_timeout_s) {
  using Next = RunningVerdict::Next;
  auto fault = [](FaultRecord f) { return RunningVerdict{Next::kFault, std::move(f)}; };
  if (const Blame b = blame_heartbeats(v.beat_ages, heartbeat_timeout_s); b.cause == "shared")
    return fault({"heartbeat", b.note, -1, -1});
  else if (!b.exclude.empty()) {
    const auto& [host, why] = b.exclude[0];
    return fault({"heartbeat", fmt::format("{} from host {} ({})", why, host, opt_.host_names[(size_t)host]), -1, host});
  }
  if (const auto worst = root_cause(v.failed)) {
    // Its root cause is chosen once the failures of the next moments are in: a killed rank's peers
    // fail right after it. A rank killed by a signal is already the root cause (no later failure
    // outranks it, and a peer's comm error never kills a process): judged at once.
    if (!first_failure_s_) first_failure_s_ = v.now_s;
    if (worst->rank.state != "killed" && v.now_s - *first_failure_s_ < 0.5 && v.ended < v.world) return {};
    std::string last;
    if (v.last_error)
      if (const auto e = v.last_error->find(worst->rank.rank); e != v.last_error->end()) last = e->second;
    // Bad input (config, data, checkpoint) stops every rank with an error before the first step:
    // not retried (reliability.md B2, B3).
    if (attempt_ == 0 && v.job_step == 0 && v.ended == v.world && worst->rank.state == "exited" &&
        worst->rank.exit_code != 86)
      startup_error_ = true;
    return fault(describe_rank_failure(*worst, last));
  }
  if (v.ok == v.world) return {Next::kDone, {}};
  if (v.stalled) return fault({"hang", *v.stalled, -1, -1});
  if (v.quiet) return fault({"traffic", *v.quiet, -1, -1});
  return {};
}

std::optional<FaultRecord> RecoveryPolicy::loss_spike(const std::string& why, int rank, int host) const {
  if (opt_.loss_spike_action != LossSpikeAction::kRestart) return std::nullopt;
  return FaultRecord{"loss-spike", why, rank, host};
}

std::vector<Exclusion> RecoveryPolicy::on_fault(FaultRecord f, int job_step) {
  f.step = job_step;
  faults_.push_back(f);
  std::vector<Exclusion> out;
  if ((f.kind == "heartbeat" || f.kind == "executor") && f.host >= 0 && exclude(f.host, f.reason))
    out.push_back({f.host, f.reason});
  return out;
}

std::vector<Exclusion> RecoveryPolicy::silent_while_stopping(const std::vector<std::pair<int, double>>& ages,
                                                             double timeout_s) {
  std::vector<Exclusion> out;
  for (const auto& [host, age] : ages) {
    const std::string why = fmt::format("no heartbeat for {:.1f} s while its ranks were stopped", age);
    if (age > timeout_s && exclude(host, why)) out.push_back({host, why});
  }
  return out;
}

bool RecoveryPolicy::wants_hang_dumps() const {
  return !faults_.empty() && (faults_.back().kind == "hang" || faults_.back().kind == "traffic");
}

bool RecoveryPolicy::ranks_stopped(int job_step) {
  if (faults_.empty()) return false;
  // The ranks' last records are in now (after a hang the survivors flush theirs on the way out;
  // SIGKILLed ranks' records are those flushed before the fault, obs.flush_ms).
  faults_.back().step = std::max(faults_.back().step, job_step);
  return wants_hang_dumps();
}

Blame RecoveryPolicy::hang_diagnosed(const std::vector<HangCulprit>& culprits) {
  Blame b = blame_hang(culprits, active_);
  take(b);
  if ((b.cause == "storage" || b.cause == "shared") && !faults_.empty()) faults_.back().kind = b.cause;
  return b;
}

StopDecision RecoveryPolicy::after_stop() {
  // Repeats and limits before spending time on checks.
  if (!faults_.empty())
    if (auto why = retry_.after_fault(faults_.back(), restarts_, startup_error_))
      return {StopDecision::Next::kEnd, *why};
  return {opt_.selfcheck ? StopDecision::Next::kSelfCheck : StopDecision::Next::kRestart, ""};
}

Blame RecoveryPolicy::selfchecks_judged(const std::vector<HostVerdict>& verdicts) {
  Blame b = blame_selfchecks(verdicts);
  take(b);
  return b;
}

void RecoveryPolicy::restart() {
  restarts_++;
  attempt_++;
}

}  // namespace ms::launch
