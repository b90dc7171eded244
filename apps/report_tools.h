// report_tools: `megascale trace RUN_DIR [-o OUT.json]`, `megascale heatmap RUN_DIR [-o OUT_DIR]
// [--margin F] [--window N] [--segment NAME]` and `megascale report LOG_DIR` (a driven job's
// recoveries: report/recovery_report.h), over obs/record_reader and the report layer
// (docs/observability.md "Views"). RUN_DIR is a run folder (holding records/) or a records folder.
#pragma once
#include <string>

#include "obs/straggler.h"  // kStragglerMargin, kStragglerWindow

namespace CLI {
class App;
}

namespace ms {

struct TraceArgs {
  std::string run_dir;
  std::string out;  // default: RUN_DIR/trace.json
};

struct HeatmapArgs {
  std::string run_dir;
  std::string out_dir;  // default: RUN_DIR/heatmap
  double margin = kStragglerMargin;  // obs/straggler.h's defaults (docs/observability.md "Stragglers")
  int window = kStragglerWindow;
  std::string segment = "forward";
};

struct RecoveryArgs {
  std::string log_dir;  // the driver's --log-dir (holding events.jsonl) or the events file
};

struct ReportArgs {
  TraceArgs trace;
  HeatmapArgs heatmap;
  RecoveryArgs recovery;
};

// Adds the `trace`, `heatmap` and `report` subcommands to `app`, filling `a`.
void add_report_commands(CLI::App& app, ReportArgs& a);
// Runs the one of them `app` parsed, if any: its exit code, or -1 when none was given.
int run_report_command(const CLI::App& app, const ReportArgs& a);

// Writes the merged Chrome trace; prints where, with the counts of ranks, slices and flows (and of
// missing ranks and unmatched sends). Returns 0.
int run_trace(const TraceArgs& a);
// Writes the heatmaps, the HTML page and stragglers.txt; prints the straggler report. Returns 0.
int run_heatmap(const HeatmapArgs& a);

}  // namespace ms
