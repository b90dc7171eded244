// heatmap: rank x segment and rank x step matrices of a run's step records (obs/record_reader.h),
// rendered as SVG (`megascale heatmap`, docs/observability.md "Views"; MegaScale §5's heatmap).
//  - segment_heatmap: one row per rank, one column per segment seen in the window's step records
//    (compute segments first, then collectives alphabetically), the mean milliseconds per step over
//    the last `window` steps;
//  - step_heatmap: one row per rank, one column per step (the last `max_steps`), the chosen segment's
//    milliseconds ("step": the step's wall time).
// Rows are ordered by (pp, dp, tp) and labelled "rank 2 (pp=0 dp=1 tp=0)". The SVG colours each cell
// against its own pipeline stage's peers (the other rows with its pp coordinate: the stage holding
// the LM head is compared with itself, not with the others): white = the peers' median, red =
// slower, blue = faster, by the difference over max(peers' median, kHeatColourFloorMs), saturated
// at +-50% (so a cell of a few milliseconds never saturates over a difference of one or two);
// grey = no data; white with "no peer" in the tooltip for a stage of one rank. It prints the value
// where there is room, carries a tooltip per cell and a legend. Pure functions: no I/O.
#pragma once
#include <string>
#include <vector>

#include "obs/record_reader.h"  // RunRecords

namespace ms {

// The colour scale's floor: a cell's difference from its peers' median is taken relative to
// max(median, this), so cells of a few ms do not turn saturated over a millisecond or two (also the
// dashboard's, launch/job_status.h).
inline constexpr double kHeatColourFloorMs = 20.0;

struct Heatmap {
  std::string title;
  std::string unit = "ms";
  std::vector<int> ranks;                // one per row
  std::vector<int> peer_class;           // per row: its pp coordinate (rows with equal values are peers)
  std::vector<std::string> row_labels;   // "rank 2 (pp=0 dp=1 tp=0)"
  std::vector<std::string> col_labels;   // segments or "step N"
  std::vector<double> values;            // row-major rows x cols; NaN = no data

  size_t rows() const { return row_labels.size(); }
  size_t cols() const { return col_labels.size(); }
  double at(size_t r, size_t c) const { return values[r * cols() + c]; }
};

// The segments of the step records' `ms` maps in the last `window` steps, in display order.
std::vector<std::string> segments_in(const RunRecords& run, int window);

Heatmap segment_heatmap(const RunRecords& run, int window);
Heatmap step_heatmap(const RunRecords& run, const std::string& segment, int max_steps);

// Each cell's value divided by its column's median over the rows with data (NaN without data or
// when the median is not positive); same layout as values.
std::vector<double> column_ratios(const Heatmap& h);

// Each cell's peers' median: the median of its column over the other rows of its peer class (NaN
// without data or without a peer); same layout as values.
std::vector<double> peer_medians(const Heatmap& h);

// The colour of a cell of `value` whose peers' median is `peer_median` (scale above): "#rrggbb".
std::string heat_colour(double value, double peer_median);

// The heatmap as a standalone SVG document.
std::string render_svg(const Heatmap& h);

// Text escaped for XML / HTML content and attributes.
std::string xml_escape(const std::string& s);

}  // namespace ms
