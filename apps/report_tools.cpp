// report_tools.cpp: see report_tools.h.
#include "report_tools.h"

#include <filesystem>

#include <CLI/CLI.hpp>  // CLI::App
#include <fmt/format.h>

#include "obs/record_reader.h"        // read_run_records
#include "report/recovery_report.h"   // recovery_table
#include "report/straggler_report.h"  // write_heatmap_report
#include "report/trace_merge.h"       // write_merged_trace

namespace ms {

namespace {

// The run folder of RUN_DIR (itself, or the parent of a records folder): where outputs go by default.
std::string run_folder(const std::string& run_dir) {
  const std::filesystem::path p = std::filesystem::path(run_dir).lexically_normal();
  const std::filesystem::path d = p.filename().empty() ? p.parent_path() : p;
  return std::filesystem::is_directory(d / "records") || d.filename() != "records" ? d.string()
                                                                                  : d.parent_path().string();
}

}  // namespace

void add_report_commands(CLI::App& app, ReportArgs& a) {
  CLI::App* tr = app.add_subcommand("trace", "merge every rank's records (RUN_DIR/records) into one Chrome trace (Perfetto)");
  tr->add_option("run_dir", a.trace.run_dir, "a run folder (train.out_dir, holding records/) or a records folder")
      ->required();
  tr->add_option("-o,--out", a.trace.out, "output JSON file (default: RUN_DIR/trace.json)");
  CLI::App* hm = app.add_subcommand(
      "heatmap", "rank x segment and rank x step heatmaps (SVG, HTML) of a run's records, and the straggler report");
  hm->add_option("run_dir", a.heatmap.run_dir, "a run folder (train.out_dir, holding records/) or a records folder")
      ->required();
  hm->add_option("-o,--out", a.heatmap.out_dir, "output folder (default: RUN_DIR/heatmap)");
  hm->add_option("--margin", a.heatmap.margin, "a rank is slow when this fraction over its peers' median")
      ->check(CLI::Range(0.0, 10.0))->capture_default_str();
  hm->add_option("--window", a.heatmap.window, "steps judged (the last ones); also the rank x segment heatmap's steps")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  hm->add_option("--segment", a.heatmap.segment, "segment of the rank x step heatmap ('step': the step time)")
      ->capture_default_str();
  CLI::App* rep = app.add_subcommand(
      "report", "a driven job's recoveries: per fault its stop, self-checks, restart, the restore path (memory: own or "
                "a peer's copy; storage) and its time, the steps repeated (from the driver's events.jsonl)");
  rep->add_option("log_dir", a.recovery.log_dir, "the driver's log folder (--log-dir, holding events.jsonl) or the file")
      ->required();
}

int run_report_command(const CLI::App& app, const ReportArgs& a) {
  if (app.got_subcommand("trace")) return run_trace(a.trace);
  if (app.got_subcommand("heatmap")) return run_heatmap(a.heatmap);
  if (app.got_subcommand("report")) {
    const std::string table = recovery_table(a.recovery.log_dir);
    fmt::print("{}", table);
    return table.find("cannot be read") == std::string::npos ? 0 : 1;
  }
  return -1;
}

int run_trace(const TraceArgs& a) {
  const RunRecords run = read_run_records(a.run_dir);
  const std::string out = a.out.empty() ? (std::filesystem::path(run_folder(a.run_dir)) / "trace.json").string() : a.out;
  const TraceStats st = write_merged_trace(run, out);
  fmt::print("trace: {} ({} ranks, {} slices, {} flows, {} events)\n", out, st.processes, st.slices, st.flows,
             st.instants);
  if (!run.missing.empty()) fmt::print("trace: {} rank(s) without a record file, shown empty\n", run.missing.size());
  if (st.unmatched_sends || st.unmatched_recvs)
    fmt::print("trace: {} send(s) and {} recv(s) without their partner in the records\n", st.unmatched_sends,
               st.unmatched_recvs);
  return 0;
}

int run_heatmap(const HeatmapArgs& a) {
  const RunRecords run = read_run_records(a.run_dir);
  HeatmapReportOptions opt;
  opt.straggler.margin = a.margin;
  opt.straggler.window = a.window;
  opt.segment = a.segment;
  const std::string out =
      a.out_dir.empty() ? (std::filesystem::path(run_folder(a.run_dir)) / "heatmap").string() : a.out_dir;
  const HeatmapReport rep = write_heatmap_report(run, opt, out);
  fmt::print("{}", rep.text);
  fmt::print("heatmap: {}/heatmap.html\n", out);
  return 0;
}

}  // namespace ms
