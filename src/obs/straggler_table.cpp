// straggler_table.cpp: see straggler_table.h.
#include "obs/straggler_table.h"

#include <algorithm>
#include <cmath>

namespace ms {
namespace {

// Calls fn(row, col, step record) for every step record of a table's rows and columns.
template <class Fn>
void for_each_cell(const RunRecords& run, const SegmentTable& t, Fn fn) {
  for (size_t row = 0; row < t.ranks.size(); row++) {
    const RankRecords* r = run.find(t.ranks[row]);
    if (!r) continue;
    for (const RecordedStep& s : r->steps) {
      auto col = std::lower_bound(t.steps.begin(), t.steps.end(), s.step);
      if (col != t.steps.end() && *col == s.step) fn(row, static_cast<size_t>(col - t.steps.begin()), s);
    }
  }
}

void fill_waits(const RunRecords& run, SegmentTable& t) {
  t.resize_wait_nan();
  bool any = false;
  for_each_cell(run, t, [&](size_t row, size_t col, const RecordedStep& s) {
    double w = 0;
    for (const std::string& seg : wait_segments()) {
      auto it = s.ms.find(seg);
      if (it != s.ms.end()) w += it->second, any = true;
    }
    t.wait[row * t.steps.size() + col] = w;
  });
  if (!any) t.wait.clear();
}

}  // namespace

SegmentTable straggler_table(const RunRecords& run, int window) {
  const SegmentTable wall = step_segment_table(run, judged_segments(), window);  // wall time
  const size_t G = wall.segments.size(), cells = wall.ranks.size() * wall.steps.size();
  SegmentTable t;
  t.ranks = wall.ranks;
  t.peer_class = wall.peer_class;
  t.steps = wall.steps;
  std::vector<size_t> keep;  // the judged segments some rank has in the window
  for (size_t g = 0; g < G; g++)
    for (size_t i = 0; i < cells; i++)
      if (std::isfinite(wall.ms[i * G + g])) {
        keep.push_back(g);
        t.segments.push_back(wall.segments[g]);
        break;
      }
  bool cpu = false;
  for_each_cell(run, t, [&](size_t, size_t, const RecordedStep& s) {
    for (size_t g : keep) cpu |= s.cpu_ms.count(wall.segments[g]) > 0;
  });
  if (cpu) t.segments.push_back(kComputeSegment);
  t.resize_nan();
  for_each_cell(run, t, [&](size_t row, size_t col, const RecordedStep& s) {
    double sum = 0;
    bool any = false;
    for (size_t k = 0; k < keep.size(); k++) {
      const double w = wall.at(row, col, keep[k]);
      if (!std::isfinite(w)) continue;
      auto c = s.cpu_ms.find(wall.segments[keep[k]]);
      t.at(row, col, k) = c != s.cpu_ms.end() ? c->second : w;
      sum += w, any = true;
    }
    if (cpu && any) t.at(row, col, keep.size()) = sum;
  });
  fill_waits(run, t);
  return t;
}

}  // namespace ms
