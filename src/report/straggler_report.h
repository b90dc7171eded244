// straggler_report: the straggler verdict of a run (obs/straggler.h over obs/straggler_table.h: the
// step records' compute segments in wall time, with the steps' communication waits) as plain text and as an HTML page embedding the heatmaps (report/heatmap.h), and the
// report folder `megascale heatmap` writes.
// The text names each straggler with its rank and coordinates —
//   "straggler: rank 2 (pp=0 dp=1 tp=0) forward +21% over its peers' median, chronic: slow in 18/20 steps"
//   "straggler: rank 1 (pp=0 dp=0 tp=1) backward one-off stall at step 12 (+40% over its peers' median), slow in 1/20 steps"
// — or says "no stragglers", and names the ranks whose record file is missing. Files are written
// atomically.
#pragma once
#include <string>
#include <vector>

#include "obs/record_reader.h"  // RunRecords
#include "obs/straggler.h"      // Straggler, StragglerOptions

namespace ms {

struct StragglerVerdict {
  SegmentTable table;               // the judged segments, the last `window` steps
  std::vector<Straggler> stragglers;  // find_stragglers' order: chronic first
};

// find_stragglers over the judged segments that occur in the records.
StragglerVerdict judge_stragglers(const RunRecords& run, const StragglerOptions& opt);

// One line per straggler (or "no stragglers ..."), then one per missing rank.
std::string straggler_text(const RunRecords& run, const StragglerVerdict& v, const StragglerOptions& opt);

struct HeatmapReportOptions {
  StragglerOptions straggler;       // margin, window (also the rank x segment heatmap's steps)
  std::string segment = "forward";  // the rank x step heatmap's segment ("step": step time)
  int max_steps = 500;              // columns of the rank x step heatmap (the last ones)
};

struct HeatmapReport {
  StragglerVerdict verdict;
  std::string text;                 // straggler_text
  std::vector<std::string> files;   // written: the two SVGs, the HTML page, the text
};

// Writes into out_dir (created): heatmap_segments.svg, heatmap_steps.svg, heatmap.html (both SVGs
// inline, the straggler table, missing ranks) and stragglers.txt.
HeatmapReport write_heatmap_report(const RunRecords& run, const HeatmapReportOptions& opt, const std::string& out_dir);

}  // namespace ms
