// job_status.cpp: see job_status.h.
#include "launch/job_status.h"

#include <sys/wait.h>  // WIFEXITED, WEXITSTATUS, WIFSIGNALED, WTERMSIG

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "base/check.h"
#include "obs/straggler_table.h"  // straggler_table
#include "report/heatmap.h"       // kHeatColourFloorMs

namespace ms::launch {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// NaN (no data) as JSON null.
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

// A sample value in Prometheus text format.
std::string prom_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// A label value with \, " and newlines escaped (the exposition format's rules).
std::string prom_label(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '\\') r += "\\\\";
    else if (c == '"') r += "\\\"";
    else if (c == '\n') r += "\\n";
    else r += c;
  }
  return r;
}

// Appends one metric family: HELP and TYPE lines, then its samples.
struct PromWriter {
  std::string out;
  void family(const std::string& name, const std::string& type, const std::string& help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const std::string& name, const std::string& labels, double v) {
    out += labels.empty() ? fmt::format("{} {}\n", name, prom_value(v))
                          : fmt::format("{}{{{}}} {}\n", name, labels, prom_value(v));
  }
};

std::string rank_label(int rank) { return fmt::format("rank=\"{}\"", rank); }

}  // namespace

JobStatus::JobStatus(int world, int window, double margin)
    : world_(world), window_(std::max(1, window)), margin_(margin), start_(Clock::now()), start_unix_ms_(unix_ms_now()),
      ranks_((size_t)std::max(0, world)) {
  MS_CHECK(world >= 1, "the dashboard needs a world of at least one rank, got {}", world);
}

void JobStatus::rank_started(int rank, int64_t pid) {
  std::lock_guard lock(mu_);
  if (rank < 0 || rank >= world_) return;
  ranks_[(size_t)rank].pid = pid;
  ranks_[(size_t)rank].state = "running";
}

void JobStatus::rank_ended(int rank, int wait_status) {
  std::lock_guard lock(mu_);
  if (rank < 0 || rank >= world_) return;
  Rank& r = ranks_[(size_t)rank];
  if (WIFEXITED(wait_status)) {
    r.state = "exited";
    r.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    r.state = "killed";
    r.signal = WTERMSIG(wait_status);
  } else {
    r.state = "exited";
  }
}

void JobStatus::launch_ended(int exit_code, const std::string& failure) {
  std::lock_guard lock(mu_);
  ended_ = true;
  exit_code_ = exit_code;
  failure_ = failure;
  end_elapsed_s_ = seconds_between(start_, Clock::now());
}

void JobStatus::set_run(const std::string& out_dir, const std::string& records_dir) {
  std::lock_guard lock(mu_);
  out_dir_ = out_dir;
  records_dir_ = records_dir;
}

void JobStatus::set_error(const std::string& error) {
  std::lock_guard lock(mu_);
  error_ = error;
}

void JobStatus::add_step_locked(int rank, const RecordedStep& s) {
  Rank& r = ranks_[(size_t)rank];
  if (s.step >= r.step) {
    r.step = s.step;
    r.tokens_per_s = s.tokens_per_s;
    r.mfu = s.mfu;
    r.last_ms = s.ms;
    if (s.loss) r.loss = *s.loss, r.loss_known = true;
  }
  r.recent.push_back(s);
  std::sort(r.recent.begin(), r.recent.end(), [](const RecordedStep& a, const RecordedStep& b) { return a.step < b.step; });
  if (r.recent.size() > (size_t)window_) r.recent.erase(r.recent.begin(), r.recent.end() - window_);
  for (const auto& [seg, ms] : s.ms)
    if (std::find(segments_.begin(), segments_.end(), seg) == segments_.end()) segments_.push_back(seg);

  // The job's view of the step: the first rank to report it gives tokens/s (every rank reports the
  // job's throughput); MFU and the loss come from whichever rank knows them (MFU: rank 0).
  auto [it, fresh] = steps_.try_emplace(s.step);
  StepPoint& p = it->second;
  if (fresh) {
    p.tokens_per_s = s.tokens_per_s;
    p.tokens = std::max(0.0, s.tokens_per_s * (double)(s.t1 - s.t0) / 1e9);
    tokens_total_ += p.tokens;
  }
  if (s.loss && std::isnan(p.loss)) p.loss = *s.loss;
  if (std::isnan(p.mfu) && !std::isnan(s.mfu)) p.mfu = s.mfu;
}

void JobStatus::add_records(const RunRecords& fresh) {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  for (const RankRecords& rr : fresh.ranks) {
    if (rr.rank < 0 || rr.rank >= world_) continue;
    Rank& r = ranks_[(size_t)rr.rank];
    if (rr.has_header) {
      r.have_header = true;
      r.header = rr.header;
    }
    const size_t n = rr.record_count();
    if (n > 0) {
      r.records += n;
      r.last_record = now;
    }
    for (const RecordedStep& s : rr.steps) add_step_locked(rr.rank, s);
  }
}

JobStatus::Latest JobStatus::latest_locked() const {
  Latest l;
  if (steps_.empty()) return l;
  l.step = steps_.rbegin()->first;
  l.tokens_per_s = steps_.rbegin()->second.tokens_per_s;
  l.mfu = steps_.rbegin()->second.mfu;
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it)
    if (!std::isnan(it->second.loss)) {
      l.loss = it->second.loss;
      break;
    }
  return l;
}

JobStatus::Heatmap JobStatus::heatmap_locked() const {
  Heatmap h;
  h.segments = segments_;
  // The ranks with a header and their recent steps, as record_reader's table wants them.
  RunRecords run;
  run.world = world_;
  for (int i = 0; i < world_; i++) {
    const Rank& r = ranks_[(size_t)i];
    if (!r.have_header) continue;
    RankRecords rr;
    rr.rank = i;
    rr.has_header = true;
    rr.header = r.header;
    rr.steps = r.recent;
    run.ranks.push_back(std::move(rr));
  }
  if (run.ranks.empty() || h.segments.empty()) return h;
  const SegmentTable table = step_segment_table(run, h.segments, window_);
  const std::vector<double> ratios = peer_ratios(table);
  h.ranks = table.ranks;
  const size_t nr = table.ranks.size(), nc = table.steps.size(), ns = table.segments.size();
  h.ms.assign(nr, std::vector<double>(ns, NAN));
  h.ratio.assign(nr, std::vector<double>(ns, NAN));
  h.straggler.assign(nr, std::vector<bool>(ns, false));
  for (size_t row = 0; row < nr; row++)
    for (size_t seg = 0; seg < ns; seg++) {
      double sum = 0, rsum = 0;
      int n = 0, rn = 0;
      for (size_t col = 0; col < nc; col++) {
        const double v = table.at(row, col, seg);
        const double q = ratios[(row * nc + col) * ns + seg];
        if (std::isfinite(v)) sum += v, n++;
        if (std::isfinite(q)) rsum += q, rn++;
      }
      if (n) h.ms[row][seg] = sum / n;
      if (rn) h.ratio[row][seg] = rsum / rn;
    }
  // Each cell's peers' median of the mean ms (the page's colour scale, with its floor).
  h.peer_ms.assign(nr, std::vector<double>(ns, NAN));
  std::vector<double> peers;
  for (size_t row = 0; row < nr; row++)
    for (size_t seg = 0; seg < ns; seg++) {
      peers.clear();
      for (size_t q = 0; q < nr; q++)
        if (q != row && table.peer_class[q] == table.peer_class[row] && std::isfinite(h.ms[q][seg]))
          peers.push_back(h.ms[q][seg]);
      if (peers.empty()) continue;
      std::sort(peers.begin(), peers.end());
      const size_t k = peers.size();
      h.peer_ms[row][seg] = k % 2 ? peers[k / 2] : 0.5 * (peers[k / 2 - 1] + peers[k / 2]);
    }
  // Stragglers: the compute segments in wall time, with the steps' waits (obs/straggler_table.h).
  const SegmentTable judged = straggler_table(run, window_);
  if (judged.segments.empty()) return h;
  StragglerOptions opt;
  opt.margin = margin_;
  opt.window = window_;
  h.stragglers = find_stragglers(judged, opt);
  for (const Straggler& s : h.stragglers) {
    if (!s.chronic) continue;
    const auto row = std::find(h.ranks.begin(), h.ranks.end(), s.rank) - h.ranks.begin();
    if ((size_t)row >= nr) continue;
    // A "compute" (summed wall time) straggler marks each of its compute segments' cells.
    for (size_t seg = 0; seg < ns; seg++)
      if (h.segments[seg] == s.segment ||
          (s.segment == kComputeSegment && std::find(judged_segments().begin(), judged_segments().end(),
                                                     h.segments[seg]) != judged_segments().end()))
        h.straggler[(size_t)row][seg] = true;
  }
  return h;
}

nlohmann::json JobStatus::status_json() const {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  using nlohmann::json;
  const double elapsed = ended_ ? end_elapsed_s_ : seconds_between(start_, now);

  // The job: the latest step any rank finished; its loss where known, else the latest known loss.
  json job = {{"world", world_},
              {"state", ended_ ? (exit_code_ == 0 ? "finished" : "failed") : "running"},
              {"exit_code", ended_ ? json(exit_code_) : json(nullptr)},
              {"failure", failure_},
              {"elapsed_s", elapsed},
              {"started_unix_ms", start_unix_ms_},
              {"out_dir", out_dir_},
              {"records_dir", records_dir_},
              {"error", error_},
              {"steps_seen", steps_.size()},
              {"tokens_total", tokens_total_}};
  const auto [step, loss, tps, mfu] = latest_locked();
  job["step"] = step < 0 ? json(nullptr) : json(step);
  job["loss"] = num(loss);
  job["tokens_per_s"] = num(tps);
  job["mfu"] = num(mfu);

  // The curves, thinned to at most kMaxHistory points (always keeping the latest).
  json hist = {{"step", json::array()}, {"loss", json::array()}, {"tokens_per_s", json::array()}, {"mfu", json::array()}};
  const size_t stride = std::max<size_t>(1, (steps_.size() + kMaxHistory - 1) / kMaxHistory);
  size_t i = 0;
  for (auto it = steps_.begin(); it != steps_.end(); ++it, ++i) {
    if (i % stride != 0 && std::next(it) != steps_.end()) continue;
    hist["step"].push_back(it->first);
    hist["loss"].push_back(num(it->second.loss));
    hist["tokens_per_s"].push_back(num(it->second.tokens_per_s));
    hist["mfu"].push_back(num(it->second.mfu));
  }

  json ranks = json::array();
  for (int k = 0; k < world_; k++) {
    const Rank& r = ranks_[(size_t)k];
    json j = {{"rank", k}, {"pid", r.pid}, {"state", r.state}, {"records", r.records}};
    j["coord"] = r.have_header ? json{{"tp", r.header.coord.tp}, {"dp", r.header.coord.dp}, {"pp", r.header.coord.pp}}
                               : json(nullptr);
    j["host"] = r.have_header ? json(r.header.host) : json(nullptr);
    j["step"] = r.step < 0 ? json(nullptr) : json(r.step);
    j["loss"] = r.loss_known ? num(r.loss) : json(nullptr);
    j["tokens_per_s"] = num(r.tokens_per_s);
    j["mfu"] = num(r.mfu);
    j["exit_code"] = r.state == "exited" ? json(r.exit_code) : json(nullptr);
    j["signal"] = r.state == "killed" ? json(r.signal) : json(nullptr);
    j["last_record_age_s"] = r.records > 0 ? json(seconds_between(r.last_record, now)) : json(nullptr);
    json ms = json::object();
    for (const auto& [seg, v] : r.last_ms) ms[seg] = num(v);
    j["ms"] = std::move(ms);
    ranks.push_back(std::move(j));
  }

  const Heatmap h = heatmap_locked();
  json stragglers = json::array();
  for (const Straggler& s : h.stragglers)
    stragglers.push_back({{"rank", s.rank},
                          {"segment", s.segment},
                          {"chronic", s.chronic},
                          {"slow_steps", s.slow_steps},
                          {"judged_steps", s.judged_steps},
                          {"median_excess", num(s.median_excess)},
                          {"worst_step", s.worst_step},
                          {"worst_excess", num(s.worst_excess)},
                          {"text", describe(s, fmt::format("rank {}", s.rank))}});
  json heat = {{"window", window_}, {"margin", margin_}, {"ranks", h.ranks}, {"segments", h.segments}};
  json hm = json::array(), hr = json::array(), hs = json::array(), hp = json::array();
  for (size_t row = 0; row < h.ranks.size(); row++) {
    json a = json::array(), b = json::array(), p = json::array();
    for (size_t s = 0; s < h.segments.size(); s++)
      a.push_back(num(h.ms[row][s])), b.push_back(num(h.ratio[row][s])), p.push_back(num(h.peer_ms[row][s]));
    hm.push_back(std::move(a));
    hr.push_back(std::move(b));
    hp.push_back(std::move(p));
    hs.push_back(h.straggler[row]);
  }
  heat["ms"] = std::move(hm);
  heat["ratio"] = std::move(hr);
  heat["peer_ms"] = std::move(hp);
  heat["colour_floor_ms"] = kHeatColourFloorMs;
  heat["straggler"] = std::move(hs);

  return {{"job", std::move(job)},
          {"history", std::move(hist)},
          {"ranks", std::move(ranks)},
          {"heatmap", std::move(heat)},
          {"stragglers", std::move(stragglers)},
          {"driver", driver_}};
}

void JobStatus::set_driver(nlohmann::json state) {
  std::lock_guard lock(mu_);
  driver_ = std::move(state);
}

std::string JobStatus::prometheus_text() const {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  PromWriter w;
  w.family("megascale_steps_total", "counter", "training steps finished (distinct steps reported by any rank)");
  w.sample("megascale_steps_total", "", (double)steps_.size());
  w.family("megascale_tokens_total", "counter", "tokens trained (each step's tokens/s times its wall time)");
  w.sample("megascale_tokens_total", "", tokens_total_);
  w.family("megascale_records_total", "counter", "records read from each rank's record file");
  for (int k = 0; k < world_; k++) w.sample("megascale_records_total", rank_label(k), (double)ranks_[(size_t)k].records);

  const auto [step, loss, tps, mfu] = latest_locked();
  w.family("megascale_world_size", "gauge", "ranks of the launch");
  w.sample("megascale_world_size", "", world_);
  w.family("megascale_step", "gauge", "latest step any rank finished (-1 before the first)");
  w.sample("megascale_step", "", step);
  w.family("megascale_loss", "gauge", "latest known training loss");
  w.sample("megascale_loss", "", loss);
  w.family("megascale_tokens_per_second", "gauge", "training throughput of the latest step (all ranks)");
  w.sample("megascale_tokens_per_second", "", tps);
  w.family("megascale_mfu", "gauge", "model FLOPs utilisation of the latest step (0..1)");
  w.sample("megascale_mfu", "", mfu);
  w.family("megascale_elapsed_seconds", "gauge", "seconds since the launch started");
  w.sample("megascale_elapsed_seconds", "", ended_ ? end_elapsed_s_ : seconds_between(start_, now));
  w.family("megascale_rank_step", "gauge", "latest step each rank finished (-1 before the first)");
  for (int k = 0; k < world_; k++) w.sample("megascale_rank_step", rank_label(k), ranks_[(size_t)k].step);
  w.family("megascale_rank_running", "gauge", "1 while the rank's process runs, else 0");
  for (int k = 0; k < world_; k++)
    w.sample("megascale_rank_running", rank_label(k), ranks_[(size_t)k].state == "running" ? 1 : 0);
  w.family("megascale_rank_last_record_age_seconds", "gauge", "seconds since the rank's last new record was read");
  for (int k = 0; k < world_; k++) {
    const Rank& r = ranks_[(size_t)k];
    if (r.records > 0) w.sample("megascale_rank_last_record_age_seconds", rank_label(k), seconds_between(r.last_record, now));
  }
  w.family("megascale_segment_ms", "gauge", "milliseconds each rank spent in each segment during its latest step");
  for (int k = 0; k < world_; k++)
    for (const auto& [seg, v] : ranks_[(size_t)k].last_ms)
      w.sample("megascale_segment_ms", fmt::format("{},segment=\"{}\"", rank_label(k), prom_label(seg)), v);
  const Heatmap h = heatmap_locked();
  w.family("megascale_straggler", "gauge",
           "1 for each (rank, segment) slow against its peers in at least 60% of the window's steps (chronic)");
  for (const Straggler& s : h.stragglers)
    if (s.chronic)
      w.sample("megascale_straggler", fmt::format("{},segment=\"{}\"", rank_label(s.rank), prom_label(s.segment)), 1);
  w.family("megascale_stragglers", "gauge", "chronic stragglers (rank, segment pairs) in the window");
  w.sample("megascale_stragglers", "",
           (double)std::count_if(h.stragglers.begin(), h.stragglers.end(), [](const Straggler& s) { return s.chronic; }));
  if (driver_.is_object()) {  // the driver's counters (driver.h)
    auto number = [&](const char* key) { return driver_.contains(key) && driver_[key].is_number() ? driver_[key].get<double>() : 0.0; };
    w.family("megascale_faults_total", "counter", "faults the driver detected");
    w.sample("megascale_faults_total", "", number("faults"));
    w.family("megascale_restarts_total", "counter", "automatic restarts from a checkpoint");
    w.sample("megascale_restarts_total", "", number("restarts"));
    w.family("megascale_attempt", "gauge", "the current attempt (0 = the first start)");
    w.sample("megascale_attempt", "", number("attempt"));
    w.family("megascale_hosts", "gauge", "hosts by state (active, spare, excluded)");
    std::map<std::string, int> by_state = {{"active", 0}, {"spare", 0}, {"excluded", 0}};
    if (driver_.contains("hosts") && driver_["hosts"].is_array())
      for (const auto& hst : driver_["hosts"]) by_state[hst.value("state", std::string("spare"))]++;
    for (const auto& [state, n] : by_state) w.sample("megascale_hosts", fmt::format("state=\"{}\"", prom_label(state)), n);
  }
  return w.out;
}

}  // namespace ms::launch
