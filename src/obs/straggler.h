// straggler: which ranks are slow in which segment, judged against their peers (the one
// implementation behind the log's summary, `megascale heatmap` and the dashboard;
// docs/observability.md "Stragglers").
// A straggler is the rank the others wait for, whatever makes it slow. Peers are the other ranks
// of its peer class (its pipeline stage). Two kinds of rows are judged:
//  - each compute segment (forward, backward, optimizer) in thread CPU time where the records have
//    it: extra work (a slower processor), precise to a few percent;
//  - kComputeSegment, "compute": the three segments' summed *wall* time (judged where the segments
//    are in CPU time): CPU time lost to a noisy neighbour or a descheduler, which CPU time does
//    not see.
// A rank is slow in a row at a step when its time exceeds the median of its peers' by more than
// `margin`; in the compute (wall) row also, where the table has the step's communication waits,
// its wait must be at most its peers' median wait (the straggler arrives last and waits least; a
// rank whose compute wall time grew but that waited longer than its peers was not the one waited
// for). Extra CPU time is extra work whatever the waits (a step's waits vary by more than a 20%
// forward's few ms). Steps where the peers' median is below `min_ms` (the
// compute row: `min_wall_ms`) are not judged. Over the last `window` steps, a rank slow in at
// least kChronicShare (60%) of the steps it has data for is a chronic straggler once at least half
// a window of steps is judged; slow in fewer (but at least one) steps, or over fewer steps: one-off stalls. A
// rank chronic in a segment is not named again for "compute". Collectives are never judged: a collective's time
// includes the wait for the slowest member, so it would name the ranks that wait, not the one
// they wait for. A rank without peers (a class of one) is never judged.
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
  // Optional: milliseconds the rank's compute thread waited on communication in the step (the
  // wait_segments()), at wait[row * steps.size() + col]; NaN = unknown. Empty: no wait data (the
  // wait condition is then not applied).
  std::vector<double> wait;

  // Sizes ms to ranks x steps x segments, all NaN (wait is left as it is).
  void resize_nan();
  // Sizes wait to ranks x steps, all NaN.
  void resize_wait_nan();
  double& at(size_t row, size_t col, size_t seg) { return ms[(row * steps.size() + col) * segments.size() + seg]; }
  double at(size_t row, size_t col, size_t seg) const {
    return ms[(row * steps.size() + col) * segments.size() + seg];
  }
};

// The defaults, derived from measured clean and slowed runs (docs/observability.md "Stragglers",
// where the measurements are). The config's obs.straggler_margin / obs.straggler_window,
// `megascale heatmap` and the dashboard default to them.
inline constexpr double kStragglerMargin = 0.10;
inline constexpr int kStragglerWindow = 30;
// The share of a window's judged steps a chronic straggler is slow in: a clean rank under outside
// load was slow in up to 53% of 30 steps, a rank stopped 30 ms of every 100 ms in 57..80%.
inline constexpr double kChronicShare = 0.6;

// The row of the compute segments' summed wall time.
inline constexpr const char* kComputeSegment = "compute";

struct StragglerOptions {
  double margin = kStragglerMargin;  // fraction over the peers' median
  int window = kStragglerWindow;     // last N steps (columns) judged
  // Cells whose peers' median is below this many ms are not judged: sub-millisecond segments vary
  // by tens of percent with caches and scheduling alone (measured: a 0.4 ms optimizer step +-40%).
  double min_ms = 1.0;
  // The same for the kComputeSegment (wall time) row: wall time moves in scheduler quanta of a few
  // ms, so a step's compute under this many ms is noise (measured: ~20 ms of compute per step
  // varied +-20% over 20-step windows with 4 ranks on 2 cores, ~95 ms within +-7% mostly).
  double min_wall_ms = 20.0;
};

struct Straggler {
  int rank = -1;
  std::string segment;
  int slow_steps = 0;     // steps of the window in which the rank was slow
  int judged_steps = 0;   // steps of the window with data for the rank and at least one peer
  bool chronic = false;   // slow_steps >= kChronicShare * judged_steps, and judged_steps * 2 >= the window
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
//            "straggler: <who> compute +25% over its peers' median in wall time (forward+backward+optimizer), chronic: ..."
//   else:    "one-off stall (not a straggler): <who> forward at step 12 (+6% over its peers' median), slow in 1/10 steps"
std::string describe(const Straggler& s, std::string_view who);

// The segments judged: forward, backward, optimizer (in CPU time where records have it; their sum
// in wall time is the kComputeSegment row).
const std::vector<std::string>& judged_segments();

// The segments of the compute thread's waits on communication (parallel/timed_wait.h's spans:
// "wait reduce_scatter", "wait tp all_gather", ... -> "wait"; the pipeline's "pp wait recv
// gradient", ... -> "pp"): their sum per step is the wait condition's input.
const std::vector<std::string>& wait_segments();

}  // namespace ms
