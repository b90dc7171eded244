// test_heatmap: the straggler report of synthetic runs names exactly the rank that was slowed (chronic
// or one-off, with its coordinates) and nobody in a clean run with noise below the margin; the
// heatmaps' rows are ordered by (pp, dp, tp) and their values are the step records' means; cells are
// coloured against their own pipeline stage's peers, with a floor that keeps cells of a few ms from
// saturating; the SVGs and the HTML page parse with an independent XML parser (Python's xml.etree) and hold one cell per
// (rank, column); `megascale heatmap` prints the report and writes the files; bad options are named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "common/test_util.h"
#include "obs/record_reader.h"
#include "report/heatmap.h"
#include "report/straggler_report.h"
#include "report/synthetic_run.h"

namespace {

using namespace ms;
using namespace ms::testing;
namespace fs = std::filesystem;

std::vector<std::string> straggler_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("straggler:", 0) == 0) out.push_back(line);
  return out;
}

class HeatmapTest : public TempDirTest {
 protected:
  const char* tag() const override { return "ms_heatmap"; }
  HeatmapReport report(const SyntheticRun& cfg, int window = 10, double margin = -1) {
    write_synthetic_run(dir_.string(), cfg);
    HeatmapReportOptions opt;
    opt.straggler.window = window;
    if (margin >= 0) opt.straggler.margin = margin;
    return write_heatmap_report(read_run_records(dir_.string()), opt, path("out"));
  }
};

TEST_F(HeatmapTest, ChronicStragglerNamedExactly) {
  SyntheticRun cfg;  // 2 x 2 x 2, peers = the 4 ranks of a stage
  cfg.steps = 20, cfg.noise = 0.02, cfg.slow_rank = 5, cfg.slow_ratio = 0.2;
  const HeatmapReport rep = report(cfg, 20);
  const std::vector<std::string> lines = straggler_lines(rep.text);
  ASSERT_EQ(lines.size(), 1u) << rep.text;
  EXPECT_EQ(lines[0].find("straggler: rank 5 (pp=1 dp=0 tp=1) forward +2"), 0u) << lines[0];
  EXPECT_NE(lines[0].find("over its peers' median, chronic: slow in 20/20 steps"), std::string::npos) << lines[0];
  ASSERT_EQ(rep.verdict.stragglers.size(), 1u);
  EXPECT_TRUE(rep.verdict.stragglers[0].chronic);
  EXPECT_NEAR(rep.verdict.stragglers[0].median_excess, 0.2, 0.05);
}

TEST_F(HeatmapTest, CleanRunWithNoiseHasNoStragglers) {
  SyntheticRun cfg;
  cfg.steps = 20, cfg.noise = 0.015;  // every ratio within (1 - 0.03, 1 + 0.03) < a 5% margin
  const HeatmapReport rep = report(cfg, 10, 0.05);
  EXPECT_TRUE(straggler_lines(rep.text).empty()) << rep.text;
  EXPECT_EQ(rep.text.find("no stragglers (8 ranks, steps 10..19, segments forward backward optimizer, margin 5%)"), 0u)
      << rep.text;
}

TEST_F(HeatmapTest, OneOffStallAndMissingRank) {
  SyntheticRun cfg;
  cfg.dp = 4, cfg.tp = 1, cfg.pp = 1, cfg.steps = 10, cfg.noise = 0.01, cfg.stall_rank = 2, cfg.stall_step = 6;
  write_synthetic_run(dir_.string(), cfg);
  fs::remove(path("records/rank-00003.jsonl"));
  const RunRecords run = read_run_records(dir_.string());
  StragglerOptions opt;
  const StragglerVerdict v = judge_stragglers(run, opt);
  const std::string text = straggler_text(run, v, opt);
  const std::vector<std::string> lines = straggler_lines(text);
  EXPECT_TRUE(lines.empty()) << text;  // a one-off stall is not a straggler, and said so
  const size_t at = text.find("one-off stall (not a straggler): rank 2 (pp=0 dp=2 tp=0) forward at step 6 (+");
  ASSERT_NE(at, std::string::npos) << text;
  EXPECT_NE(text.find("slow in 1/10 steps", at), std::string::npos) << text;
  EXPECT_NE(text.find("no stragglers"), std::string::npos) << text;
  EXPECT_NE(text.find("missing: rank 3 (pp=0 dp=3 tp=0): no record file"), std::string::npos) << text;
}

TEST_F(HeatmapTest, MatricesOrderedByCoordinatesWithStepMeans) {
  SyntheticRun cfg;
  cfg.dp = 2, cfg.tp = 2, cfg.pp = 2, cfg.steps = 6, cfg.slow_rank = 2, cfg.slow_ratio = 0.5, cfg.slow_from = 4;
  write_synthetic_run(dir_.string(), cfg);
  const RunRecords run = read_run_records(dir_.string());
  const Heatmap seg = segment_heatmap(run, 4);  // steps 2..5: rank 2 slow in 4 and 5
  ASSERT_EQ(seg.rows(), 8u);
  EXPECT_EQ(seg.row_labels[0], "rank 0 (pp=0 dp=0 tp=0)");
  EXPECT_EQ(seg.row_labels[2], "rank 2 (pp=0 dp=1 tp=0)");
  EXPECT_EQ(seg.row_labels[4], "rank 4 (pp=1 dp=0 tp=0)");
  ASSERT_GE(seg.cols(), 4u);
  EXPECT_EQ(seg.col_labels[0], "data");
  EXPECT_EQ(seg.col_labels[1], "forward");
  EXPECT_EQ(seg.col_labels[2], "backward");
  EXPECT_EQ(seg.col_labels[3], "optimizer");
  EXPECT_NEAR(seg.at(0, 1), 4.0, 1e-9);
  EXPECT_NEAR(seg.at(2, 1), 4.0 * 1.25, 1e-9);  // mean of 4, 4, 6, 6
  const std::vector<double> q = column_ratios(seg);
  EXPECT_NEAR(q[2 * seg.cols() + 1], 1.25, 1e-9);
  const Heatmap steps = step_heatmap(run, "forward", 100);
  ASSERT_EQ(steps.cols(), 6u);
  EXPECT_EQ(steps.col_labels[5], "step 5");
  EXPECT_NEAR(steps.at(2, 5), 6.0, 1e-9);
  EXPECT_NEAR(steps.at(2, 3), 4.0, 1e-9);
  const Heatmap st = step_heatmap(run, kStepTimeSegment, 3);
  EXPECT_EQ(st.cols(), 3u);
  EXPECT_GT(st.at(0, 0), 10.0);
}

// The fill of each cell of an SVG heatmap, in row-major order (the rects that carry a <title>).
std::vector<std::string> cell_fills(const std::string& svg) {
  std::vector<std::string> out;
  for (size_t at = svg.find("<rect "); at != std::string::npos; at = svg.find("<rect ", at + 1)) {
    const size_t end = svg.find('>', at);
    if (svg.compare(end + 1, 7, "<title>") != 0) continue;
    const size_t f = svg.find("fill=\"", at) + 6;
    out.push_back(svg.substr(f, svg.find('"', f) - f));
  }
  return out;
}
int green(const std::string& hex) { return std::stoi(hex.substr(3, 2), nullptr, 16); }  // white 247, full red 24

TEST(HeatmapColour, EachCellAgainstItsOwnStagePeersWithAFloor) {
  Heatmap h;
  h.row_labels = {"rank 0 (pp=0)", "rank 1 (pp=0)", "rank 2 (pp=1)", "rank 3 (pp=1)"};
  h.ranks = {0, 1, 2, 3};
  h.peer_class = {0, 0, 1, 1};
  h.col_labels = {"forward", "optimizer", "backward"};
  // forward: stage 1 (the LM head) is three times stage 0 on both ranks: nobody is slower than its
  // peers. optimizer: a 2 ms cell against a 1 ms peer. backward: 60 ms against 40 ms (+50%).
  h.values = {10, 1, 40,  //
              10, 2, 40,  //
              30, 1, 60,  //
              30, 1, 40};
  const std::vector<std::string> fill = cell_fills(render_svg(h));
  ASSERT_EQ(fill.size(), 12u);
  for (int r = 0; r < 4; r++) EXPECT_EQ(fill[r * 3], "#f7f7f7") << "forward of row " << r;  // white: at its peers
  EXPECT_GT(green(fill[1 * 3 + 1]), 200) << fill[4];  // +1 ms on 1 ms: light (the floor), not saturated red
  EXPECT_EQ(fill[2 * 3 + 2], "#b2182b");              // +50% of 40 ms: saturated red
  const int red = std::stoi(fill[3 * 3 + 2].substr(1, 2), nullptr, 16), blue = std::stoi(fill[3 * 3 + 2].substr(5, 2), nullptr, 16);
  EXPECT_LT(red, 200) << fill[11];  // 40 against 60: blue
  EXPECT_GT(blue, red) << fill[11];
  // The peers' medians behind it: each row's stage only, itself excluded.
  const std::vector<double> m = peer_medians(h);
  EXPECT_EQ(m[2 * 3 + 0], 30.0);
  EXPECT_EQ(m[0 * 3 + 1], 2.0);
  // A stage of one rank has no peer: white, and said so in the tooltip.
  h.peer_class = {0, 0, 1, 2};
  const std::string svg = render_svg(h);
  EXPECT_EQ(cell_fills(svg)[3 * 3], "#f7f7f7");
  EXPECT_NE(svg.find("rank 3 (pp=1), forward: 30.000 ms (no peer in its stage)"), std::string::npos);
}

TEST_F(HeatmapTest, FilesParseAndCommandPrintsTheReport) {
  SyntheticRun cfg;
  cfg.steps = 12, cfg.noise = 0.02, cfg.slow_rank = 6, cfg.slow_ratio = 0.3;
  write_synthetic_run(dir_.string(), cfg);
  const CmdResult r = run_cmd(std::string(MEGASCALE_BINARY) + " heatmap " + dir_.string() + " -o " + path("hm") +
                              " --window 8 --margin 0.1 --segment backward");
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<std::string> lines = straggler_lines(r.output);
  ASSERT_EQ(lines.size(), 1u) << r.output;
  EXPECT_EQ(lines[0].find("straggler: rank 6 (pp=1 dp=1 tp=0) forward"), 0u) << lines[0];
  EXPECT_NE(lines[0].find("chronic: slow in 8/8 steps"), std::string::npos) << lines[0];
  for (const char* f : {"heatmap_segments.svg", "heatmap_steps.svg", "heatmap.html", "stragglers.txt"})
    EXPECT_TRUE(fs::exists(path("hm") + "/" + f)) << f;
  // Independent parse: each SVG is XML with one titled cell per (rank, column); the page names the straggler.
  spit(path("check.py"), R"PY(
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
out = []
for name in ("heatmap_segments.svg", "heatmap_steps.svg"):
    root = ET.parse(sys.argv[1] + "/" + name).getroot()
    cells = [r for r in root.iter(ns + "rect") if r.find(ns + "title") is not None]
    labels = [t.text for t in root.iter(ns + "text") if t.text and t.text.startswith("rank ")]
    out.append("%s %d %d %s" % (name, len(cells), len(labels), labels[0]))
page = open(sys.argv[1] + "/heatmap.html").read()
out.append("html " + str("rank 6 (pp=1 dp=1 tp=0)" in page and "<svg" in page))
print("\n".join(out))
)PY");
  const CmdResult py = run_cmd("/usr/bin/python3 " + path("check.py") + " " + path("hm"));
  ASSERT_EQ(py.code, 0) << py.output;
  const RunRecords run = read_run_records(dir_.string());
  const size_t segs = segments_in(run, 8).size();
  EXPECT_NE(py.output.find(fmt::format("heatmap_segments.svg {} 8 rank 0 (pp=0 dp=0 tp=0)", 8 * segs)),
            std::string::npos)
      << py.output;
  EXPECT_NE(py.output.find("heatmap_steps.svg 96 8 rank 0"), std::string::npos) << py.output;  // 8 ranks x 12 steps
  EXPECT_NE(py.output.find("html True"), std::string::npos) << py.output;
  // Named errors.
  const CmdResult bad = run_cmd(std::string(MEGASCALE_BINARY) + " heatmap " + dir_.string() + " --segment nope");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("--segment nope"), std::string::npos) << bad.output;
}

}  // namespace
