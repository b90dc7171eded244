// segment_report.cpp: see segment_report.h.
#include "train/segment_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/check.h"  // MS_CHECK
#include "base/dtype.h"  // DType

namespace ms {
namespace {


}  // namespace

const std::vector<std::string>& summary_segments() {
  static const std::vector<std::string> segs = {
      "step",          "data",          "forward",           "backward",          "optimizer",
      "checkpoint-stage1", "tp-all-gather", "tp-reduce-scatter", "tp-all-reduce",   "pp-send",
      "pp-recv",       "dp-reduce-scatter", "dp-all-gather",  "dp-all-reduce",     "emb-all-reduce"};
  return segs;
}

SegmentReport::SegmentReport(const ObsConfig& cfg, Communicator* world, std::vector<int> peer_class,
                             std::vector<std::string> labels)
    : cfg_(cfg), world_(world), classes_(std::move(peer_class)), labels_(std::move(labels)) {
  MS_CHECK(classes_.size() == labels_.size() && classes_.size() == static_cast<size_t>(world_ ? world_->size() : 1),
           "SegmentReport: {} peer classes and {} labels for {} rank(s)", classes_.size(), labels_.size(),
           world_ ? world_->size() : 1);
  step_ms_.reserve(64);
  totals_.reserve(64);
}

const std::vector<SegmentReport::SegmentMs>& SegmentReport::end_step(int step, double step_ms) {
  TraceSink::get().take_segment_totals(step, totals_);
  step_ms_.clear();
  step_ms_.push_back({"step", step_ms, 0});
  for (const TraceSink::SegmentTotal& t : totals_) {
    auto it = std::find_if(step_ms_.begin(), step_ms_.end(), [&](const SegmentMs& p) { return p.seg == t.seg; });
    if (it == step_ms_.end()) step_ms_.push_back({t.seg, t.ns / 1e6, t.cpu_ns / 1e6});
    else it->ms += t.ns / 1e6, it->cpu_ms += t.cpu_ns / 1e6;
  }
  if (cfg_.summary_every > 0) {
    steps_.push_back(step);
    auto find = [&](const std::string& s) {
      return std::find_if(step_ms_.begin(), step_ms_.end(), [&](const SegmentMs& p) { return p.seg == s; });
    };
    for (const std::string& s : summary_segments()) {
      auto it = find(s);
      mine_.push_back(it == step_ms_.end() ? 0.0f : static_cast<float>(it->ms));
    }
    for (const std::string& s : judged_segments()) {
      auto it = find(s);
      mine_.push_back(it == step_ms_.end() ? 0.0f : static_cast<float>(it->cpu_ms));
    }
    float wait = 0;  // the compute thread's waits on communication (the straggler's is the least)
    for (const std::string& s : wait_segments()) {
      auto it = find(s);
      if (it != step_ms_.end()) wait += static_cast<float>(it->ms);
    }
    mine_.push_back(wait);
  }
  return step_ms_;
}

std::vector<std::pair<std::string, std::string>> SegmentReport::summarize(int step) {
  std::vector<std::pair<std::string, std::string>> out;
  if (cfg_.summary_every <= 0 || step % cfg_.summary_every != 0 || steps_.empty()) return out;
  const std::vector<std::string>& segs = summary_segments();
  // Per step: the summary's wall ms, the judged segments' CPU ms, the step's wait.
  const size_t G0 = segs.size(), J = judged_segments().size(), G = G0 + J + 1, W = steps_.size();
  const int n = world_ ? world_->size() : 1;
  if (n == 1) {  // nothing to compare across ranks: a single rank's step line says it all
    steps_.clear();
    mine_.clear();
    return out;
  }
  // Every rank has the same steps since the last summary (end_step runs every step on every rank).
  std::vector<float> all(n * W * G);
  if (world_) world_->all_gather(mine_.data(), all.data(), W * G, DType::kF32);
  else all = mine_;
  const int first = steps_.front(), last = steps_.back();
  steps_.clear();
  mine_.clear();
  if (world_ && world_->rank() != 0) return out;

  // Per segment: each rank's mean ms per step; min / median / max across ranks.
  std::string line;
  for (size_t g = 0; g < G0; g++) {
    std::vector<std::pair<double, int>> mean(n);
    bool any = false;
    for (int r = 0; r < n; r++) {
      double s = 0;
      for (size_t c = 0; c < W; c++) s += all[(r * W + c) * G + g];
      mean[r] = {s / W, r};
      any |= s > 0;
    }
    if (!any) continue;
    std::vector<std::pair<double, int>> sorted = mean;
    std::sort(sorted.begin(), sorted.end());
    const double med = n % 2 ? sorted[n / 2].first : 0.5 * (sorted[n / 2 - 1].first + sorted[n / 2].first);
    line += fmt::format("{}{} {:.1f}/{:.1f}/{:.1f} (max rank {})", line.empty() ? "" : "; ", segs[g],
                        sorted.front().first, med, sorted.back().first, sorted.back().second);
  }
  out.push_back({"segments", fmt::format("steps {}-{}, ms per step min/median/max across {} rank(s): {}", first, last,
                                         n, line)});

  // The straggler window: the last straggler_window steps of every rank; judged: the compute
  // segments in CPU time, their sum in wall time (obs/straggler.h), with the waits.
  for (size_t c = 0; c < W; c++) {
    hist_steps_.push_back(first + static_cast<int>(c));
    for (int r = 0; r < n; r++)
      for (size_t g = 0; g < G; g++) hist_.push_back(all[(r * W + c) * G + g]);
  }
  const size_t keep = static_cast<size_t>(cfg_.straggler_window);
  if (hist_steps_.size() > keep) {
    const size_t drop = hist_steps_.size() - keep;
    hist_steps_.erase(hist_steps_.begin(), hist_steps_.begin() + drop);
    hist_.erase(hist_.begin(), hist_.begin() + drop * n * G);
  }
  SegmentTable t;
  for (int r = 0; r < n; r++) t.ranks.push_back(r), t.peer_class.push_back(classes_[r]);
  t.steps = hist_steps_;
  std::vector<size_t> wall_idx;  // the judged segments' wall ms among the summary's
  for (size_t k = 0; k < J; k++) {
    t.segments.push_back(judged_segments()[k]);
    wall_idx.push_back(static_cast<size_t>(std::find(segs.begin(), segs.end(), judged_segments()[k]) - segs.begin()));
  }
  t.segments.push_back(kComputeSegment);
  t.resize_nan();
  t.resize_wait_nan();
  for (int r = 0; r < n; r++)
    for (size_t c = 0; c < t.steps.size(); c++) {
      const float* v = &hist_[(c * n + r) * G];
      double wall = 0;
      for (size_t k = 0; k < J; k++) {
        if (v[G0 + k] > 0) t.at(r, c, k) = v[G0 + k];
        wall += v[wall_idx[k]];
      }
      if (wall > 0) t.at(r, c, J) = wall;
      t.wait[r * t.steps.size() + c] = v[G0 + J];
    }
  StragglerOptions opt;
  opt.margin = cfg_.straggler_margin;
  opt.window = cfg_.straggler_window;
  stragglers_.clear();
  std::string stalls;
  int stall_count = 0;
  for (const Straggler& s : find_stragglers(t, opt)) {
    if (s.chronic) {
      stragglers_.push_back(s);
      out.push_back({"straggler", fmt::format("{} (steps {}-{})", describe(s, labels_[s.rank]),
                                              t.steps.front(), t.steps.back())});
    } else if (s.worst_step >= first && ++stall_count <= 5) {  // a stall in the steps just summarized
      stalls += fmt::format("{}rank {} {} at step {} ({:+.0f}%)", stalls.empty() ? "" : ", ", s.rank, s.segment,
                            s.worst_step, s.worst_excess * 100);
    }
  }
  if (!stalls.empty())
    out.push_back({"stall", fmt::format("one-off stalls in steps {}-{} (over the peers' median, not chronic): "
                                        "{}{}", first, last, stalls, stall_count > 5 ? fmt::format(" and {} more", stall_count - 5) : "")});
  return out;
}

}  // namespace ms
