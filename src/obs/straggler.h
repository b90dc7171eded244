// straggler: which ranks are slow in which segment, judged against their peers (the one
// implementation behind the log's summary, `megascale heatmap` and the dashboard;
// docs/observability.md "Stragglers").
// A rank is slow in a segment at a step when its time exceeds the median of its peers' times (the
// other ranks of its peer class, i.e. its pipeline stage) by more than `margin` (steps where the
// peers' median is below `min_ms` are not judged). Over the last
// `window` steps, a rank slow in at least half of the steps it has data for is a chronic straggler;
// slow in fewer (but at least one) steps: one-off stalls. Judge compute segments (forward, backward,
// optimizer): a collective's time includes the wait for the slowest member, so it would name the
// ranks that wait, not the one they wait for. A rank without peers (a class of one) is never judged.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ms {

// Per-step segment times of several ranks.
struct SegmentTable {
  std::vector<int> ranks;             // world ranks, one row each
  std::vector<int> peer_class;        // per row; rows with equal values are peers (the pp coordinate)
  std::vector<int> steps;             // columns, ascending
  std::vector<std::string> segments;  // the segments to judge
  // Milliseconds, at ms[(row * steps.size() + col) * segments.size() + seg]; NaN = no data.
  std::vector<double> ms;

  // Sizes ms to ranks x steps x segments, all NaN.
  void resize_nan();
  double& at(size_t row, size_t col, size_t seg) { return ms[(row * steps.size() + col) * segments.size() + seg]; }
  double at(size_t row, size_t col, size_t seg) const {
    return ms[(row * steps.size() + col) * segments.size() + seg];
  }
};

struct StragglerOptions {
  double margin = 0.05;  // fraction over the peers' median
  int window = 10;       // last N steps (columns) judged
  // Cells whose peers' median is below this many ms are not judged: sub-millisecond segments vary
  // by tens of percent with caches and scheduling alone (measured: a 0.4 ms optimizer step +-40%).
  double min_ms = 1.0;
};

struct Straggler {
  int rank = -1;
  std::string segment;
  int slow_steps = 0;     // steps of the window in which the rank was slow
  int judged_steps = 0;   // steps of the window with data for the rank and at least one peer
  bool chronic = false;   // slow_steps * 2 >= judged_steps
  double median_excess = 0;  // median over the judged steps of time / peers' median - 1
  int worst_step = -1;    // the step of the largest excess, and that excess
  double worst_excess = 0;
};

// Ratio of each cell to its peers' median (NaN where there is no data or no peer), same layout as ms.
std::vector<double> peer_ratios(const SegmentTable& t);

// Every (rank, segment) slow in at least one step of the window; chronic ones first, then by
// median excess, largest first.
std::vector<Straggler> find_stragglers(const SegmentTable& t, const StragglerOptions& opt);

// The one wording of a finding (log, heatmap report, dashboard); who: "rank 2 (pp=0 dp=2 tp=0)".
//   chronic: "straggler: <who> forward +21% over its peers' median, chronic: slow in 10/10 steps"
//   else:    "one-off stall (not a straggler): <who> forward at step 12 (+6% over its peers' median), slow in 1/10 steps"
std::string describe(const Straggler& s, std::string_view who);

// The segments judged: forward, backward, optimizer (compute; in CPU time where records have it).
const std::vector<std::string>& judged_segments();

}  // namespace ms
