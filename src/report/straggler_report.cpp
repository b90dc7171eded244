// straggler_report.cpp: see straggler_report.h.
#include "report/straggler_report.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "base/atomic_file.h"  // write_text_atomic
#include "base/check.h"        // MS_CHECK
#include "obs/straggler_table.h"  // straggler_table
#include "report/heatmap.h"    // segment_heatmap, step_heatmap, render_svg, xml_escape

namespace ms {

namespace {

std::string label_of(const RunRecords& run, int rank) {
  const RankRecords* r = run.find(rank);
  return r ? r->label() : fmt::format("rank {}", rank);
}

std::string verdict_line(const RunRecords& run, const Straggler& s) { return describe(s, label_of(run, s.rank)); }

std::string html_page(const RunRecords& run, const StragglerVerdict& v, const std::string& text,
                      const std::string& seg_svg, const std::string& step_svg) {
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>megascale heatmap</title>\n"
                  "<style>body{font-family:sans-serif;margin:20px} table{border-collapse:collapse} "
                  "td,th{border:1px solid #bbb;padding:3px 8px;text-align:right} th{background:#eee} "
                  "td.l{text-align:left} .chronic{background:#f4c7c3} pre{background:#f6f6f6;padding:8px}</style>\n"
                  "</head><body>\n";
  h += fmt::format("<h1>megascale heatmap</h1>\n<p>records: {} — world {}, {} rank file(s)</p>\n",
                   xml_escape(run.records_dir), run.world, run.ranks.size());
  h += "<h2>Stragglers</h2>\n<pre>" + xml_escape(text) + "</pre>\n";
  if (!v.stragglers.empty()) {
    h += "<table><tr><th>rank</th><th>segment</th><th>kind</th><th>slow steps</th><th>median excess</th>"
         "<th>worst step</th><th>worst excess</th></tr>\n";
    for (const Straggler& s : v.stragglers)
      h += fmt::format("<tr class=\"{}\"><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>"
                       "<td>{}/{}</td><td>{:+.1f}%</td><td>{}</td><td>{:+.1f}%</td></tr>\n",
                       s.chronic ? "chronic" : "oneoff", xml_escape(label_of(run, s.rank)), xml_escape(s.segment),
                       s.chronic ? "chronic" : "one-off", s.slow_steps, s.judged_steps, s.median_excess * 100,
                       s.worst_step, s.worst_excess * 100);
    h += "</table>\n";
  }
  h += "<h2>Rank &times; segment</h2>\n" + seg_svg;
  h += "<h2>Rank &times; step</h2>\n" + step_svg;
  h += "</body></html>\n";
  return h;
}

}  // namespace

StragglerVerdict judge_stragglers(const RunRecords& run, const StragglerOptions& opt) {
  StragglerVerdict v;
  v.table = straggler_table(run, opt.window);
  v.stragglers = find_stragglers(v.table, opt);
  return v;
}

std::string straggler_text(const RunRecords& run, const StragglerVerdict& v, const StragglerOptions& opt) {
  std::string out;
  for (const Straggler& s : v.stragglers) out += verdict_line(run, s) + "\n";
  const bool chronic = std::any_of(v.stragglers.begin(), v.stragglers.end(), [](const Straggler& s) { return s.chronic; });
  if (!chronic) {
    const SegmentTable& t = v.table;
    std::string segs;
    for (const std::string& s : t.segments) segs += (segs.empty() ? "" : " ") + s;
    out += t.steps.empty()
               ? fmt::format("no stragglers: no step records to judge ({} rank file(s))\n", run.ranks.size())
               : fmt::format("no stragglers ({} ranks, steps {}..{}, segments {}, margin {:.0f}%)\n", t.ranks.size(),
                             t.steps.front(), t.steps.back(), segs.empty() ? "none" : segs, opt.margin * 100);
  }
  const RankCoord shape = run.shape();
  for (int r : run.missing)
    out += fmt::format("missing: {}: no record file\n", rank_label(r, coord_of_rank(r, shape, run.order())));
  return out;
}

HeatmapReport write_heatmap_report(const RunRecords& run, const HeatmapReportOptions& opt, const std::string& out_dir) {
  MS_CHECK(opt.straggler.window >= 1, "heatmap: --window must be at least 1, got {}", opt.straggler.window);
  MS_CHECK(opt.straggler.margin >= 0, "heatmap: --margin must not be negative, got {}", opt.straggler.margin);
  if (opt.segment != kStepTimeSegment) {
    const std::vector<std::string> all = segments_in(run, 0);
    std::string known;
    for (const std::string& s : all) known += " " + s;
    MS_CHECK(std::find(all.begin(), all.end(), opt.segment) != all.end(),
             "heatmap: --segment {}: no step record of {} has it (segments:{}; or 'step' for the step time)",
             opt.segment, run.records_dir, known.empty() ? " none" : known);
  }
  HeatmapReport rep;
  rep.verdict = judge_stragglers(run, opt.straggler);
  rep.text = straggler_text(run, rep.verdict, opt.straggler);
  const std::string seg_svg = render_svg(segment_heatmap(run, opt.straggler.window));
  const std::string step_svg = render_svg(step_heatmap(run, opt.segment, opt.max_steps));
  std::filesystem::create_directories(out_dir);
  const std::filesystem::path d(out_dir);
  auto put = [&](const std::string& name, const std::string& text) {
    write_text_atomic((d / name).string(), text);
    rep.files.push_back((d / name).string());
  };
  put("heatmap_segments.svg", seg_svg);
  put("heatmap_steps.svg", step_svg);
  put("heatmap.html", html_page(run, rep.verdict, rep.text, seg_svg, step_svg));
  put("stragglers.txt", rep.text);
  return rep;
}

}  // namespace ms
