// heatmap.cpp: see heatmap.h.
#include "report/heatmap.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace ms {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Display rank of a segment: compute segments in step order, then the rest alphabetically.
int segment_rank(const std::string& s) {
  static const char* kFirst[] = {"data", "forward", "backward", "optimizer", "checkpoint-stage1", "eval"};
  for (int i = 0; i < 6; i++)
    if (s == kFirst[i]) return i;
  return 6;
}

// Row order of a table (rows ascending by rank) by (pp, dp, tp); with their labels.
std::vector<size_t> row_order(const RunRecords& run, const SegmentTable& t, std::vector<std::string>& labels) {
  std::vector<size_t> order(t.ranks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto coord = [&](size_t row) { return run.find(t.ranks[row])->header.coord; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const RankCoord x = coord(a), y = coord(b);
    return std::tie(x.pp, x.dp, x.tp) < std::tie(y.pp, y.dp, y.tp);
  });
  labels.clear();
  for (size_t row : order) labels.push_back(run.find(t.ranks[row])->label());
  return order;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Diverging colour of a shade in [-1, 1]: white at 0, red above, blue below; NaN: grey (no data).
std::string colour(double shade) {
  if (!std::isfinite(shade)) return "#cccccc";
  const double d = std::clamp(shade, -1.0, 1.0);
  // White (247,247,247) to red (178,24,43) or blue (33,102,172).
  const int w[3] = {247, 247, 247}, red[3] = {178, 24, 43}, blue[3] = {33, 102, 172};
  const int* to = d >= 0 ? red : blue;
  const double a = std::fabs(d);
  int c[3];
  for (int i = 0; i < 3; i++) c[i] = static_cast<int>(std::lround(w[i] + (to[i] - w[i]) * a));
  return fmt::format("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
}

std::string value_text(double v) {
  if (!std::isfinite(v)) return "";
  return v >= 100 ? fmt::format("{:.0f}", v) : v >= 10 ? fmt::format("{:.1f}", v) : fmt::format("{:.2f}", v);
}

std::string percent(double ratio) {
  return std::isfinite(ratio) ? fmt::format("{:+.0f}%", (ratio - 1) * 100) : std::string("n/a");
}

// The signed shade of a cell: its difference from the peers' median over max(median, floor),
// saturated at +-50%; 0 without peers, NaN without data.
double shade(double value, double peer_median) {
  if (!std::isfinite(value)) return kNaN;
  if (!std::isfinite(peer_median)) return 0;
  return std::clamp((value - peer_median) / std::max(peer_median, kHeatColourFloorMs) / 0.5, -1.0, 1.0);
}

}  // namespace

std::string heat_colour(double value, double peer_median) { return colour(shade(value, peer_median)); }

std::vector<double> peer_medians(const Heatmap& h) {
  std::vector<double> out(h.values.size(), kNaN);
  std::vector<double> peers;
  for (size_t c = 0; c < h.cols(); c++)
    for (size_t r = 0; r < h.rows(); r++) {
      if (!std::isfinite(h.at(r, c))) continue;
      peers.clear();
      for (size_t q = 0; q < h.rows(); q++)
        if (q != r && q < h.peer_class.size() && r < h.peer_class.size() && h.peer_class[q] == h.peer_class[r] &&
            std::isfinite(h.at(q, c)))
          peers.push_back(h.at(q, c));
      out[r * h.cols() + c] = median_of(peers);
    }
  return out;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0.
        if (static_cast<unsigned char>(ch) < 0x20 && ch != '\n' && ch != '\t') out += ' ';
        else out += ch;
    }
  }
  return out;
}

std::vector<std::string> segments_in(const RunRecords& run, int window) {
  std::set<int> steps;
  for (const RankRecords& r : run.ranks)
    for (const RecordedStep& s : r.steps) steps.insert(s.step);
  const int first = window > 0 && steps.size() > static_cast<size_t>(window) ? *std::prev(steps.end(), window)
                                                                             : std::numeric_limits<int>::min();
  std::set<std::string> segs;
  for (const RankRecords& r : run.ranks)
    for (const RecordedStep& s : r.steps)
      if (s.step >= first)
        for (const auto& [seg, ms] : s.ms) segs.insert(seg);
  std::vector<std::string> out(segs.begin(), segs.end());
  std::stable_sort(out.begin(), out.end(),
                   [](const std::string& a, const std::string& b) { return segment_rank(a) < segment_rank(b); });
  return out;
}

Heatmap segment_heatmap(const RunRecords& run, int window) {
  Heatmap h;
  const SegmentTable t = step_segment_table(run, segments_in(run, window), window);
  h.title = fmt::format("mean ms per step by rank and segment, steps {}..{}", t.steps.empty() ? 0 : t.steps.front(),
                        t.steps.empty() ? 0 : t.steps.back());
  h.col_labels = t.segments;
  for (size_t row : row_order(run, t, h.row_labels)) {
    h.ranks.push_back(t.ranks[row]);
    h.peer_class.push_back(t.peer_class[row]);
    for (size_t g = 0; g < t.segments.size(); g++) {
      double sum = 0;
      int n = 0;
      for (size_t c = 0; c < t.steps.size(); c++)
        if (std::isfinite(t.at(row, c, g))) sum += t.at(row, c, g), n++;
      h.values.push_back(n ? sum / n : kNaN);
    }
  }
  return h;
}

Heatmap step_heatmap(const RunRecords& run, const std::string& segment, int max_steps) {
  Heatmap h;
  const SegmentTable t = step_segment_table(run, {segment}, max_steps);
  h.title = segment == kStepTimeSegment ? std::string("step time (ms) by rank and step")
                                        : fmt::format("{} (ms per step) by rank and step", segment);
  for (int s : t.steps) h.col_labels.push_back(fmt::format("step {}", s));
  for (size_t row : row_order(run, t, h.row_labels)) {
    h.ranks.push_back(t.ranks[row]);
    h.peer_class.push_back(t.peer_class[row]);
    for (size_t c = 0; c < t.steps.size(); c++) h.values.push_back(t.at(row, c, 0));
  }
  return h;
}

std::vector<double> column_ratios(const Heatmap& h) {
  std::vector<double> out(h.values.size(), kNaN);
  for (size_t c = 0; c < h.cols(); c++) {
    std::vector<double> col;
    for (size_t r = 0; r < h.rows(); r++)
      if (std::isfinite(h.at(r, c))) col.push_back(h.at(r, c));
    const double m = median_of(col);
    if (!(m > 0)) continue;
    for (size_t r = 0; r < h.rows(); r++)
      if (std::isfinite(h.at(r, c))) out[r * h.cols() + c] = h.at(r, c) / m;
  }
  return out;
}

std::string render_svg(const Heatmap& h) {
  const std::vector<double> peer = peer_medians(h);
  const size_t R = h.rows(), C = h.cols();
  // Geometry: labels in a 12px monospace-ish font (~7.2 px per character).
  size_t label_chars = 8;
  for (const std::string& l : h.row_labels) label_chars = std::max(label_chars, l.size());
  size_t col_chars = 4;
  for (const std::string& l : h.col_labels) col_chars = std::max(col_chars, l.size());
  const bool wide = C <= 24;  // room to print values in the cells
  const int cw = wide ? 64 : std::max(6, std::min(24, static_cast<int>(1200 / std::max<size_t>(C, 1))));
  const int ch = 22;
  const int left = 10 + static_cast<int>(label_chars * 7.2) + 8;
  const int top = 40 + static_cast<int>(std::min<size_t>(col_chars, 24) * 7.2 * 0.72) + 10;
  const int label_every = wide ? 1 : std::max(1, static_cast<int>(std::ceil(14.0 / cw)));
  const int grid_w = cw * static_cast<int>(C), grid_h = ch * static_cast<int>(R);
  const int legend_top = top + grid_h + 20;
  const int width = std::max(left + grid_w + 20, 520), height = legend_top + 60;

  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" font-size=\"12\">\n",
      width, height, width, height);
  s += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n", width, height);
  s += fmt::format("<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", xml_escape(h.title));
  // Column labels, rotated.
  for (size_t c = 0; c < C; c += label_every) {
    const int x = left + static_cast<int>(c) * cw + cw / 2, y = top - 6;
    s += fmt::format("<text x=\"{}\" y=\"{}\" transform=\"rotate(-45 {} {})\">{}</text>\n", x, y, x, y,
                     xml_escape(h.col_labels[c]));
  }
  for (size_t r = 0; r < R; r++) {
    const int y = top + static_cast<int>(r) * ch;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 8, y + ch / 2 + 4,
                     xml_escape(h.row_labels[r]));
    for (size_t c = 0; c < C; c++) {
      const double v = h.at(r, c), m = peer[r * C + c], d = shade(v, m);
      const int x = left + static_cast<int>(c) * cw;
      const std::string tip =
          !std::isfinite(v) ? fmt::format("{}, {}: no data", h.row_labels[r], h.col_labels[c])
          : std::isfinite(m) ? fmt::format("{}, {}: {:.3f} {} ({} vs its stage peers' median {:.3f})", h.row_labels[r],
                                           h.col_labels[c], v, h.unit, percent(m > 0 ? v / m : kNaN), m)
                             : fmt::format("{}, {}: {:.3f} {} (no peer in its stage)", h.row_labels[r], h.col_labels[c],
                                           v, h.unit);
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\"><title>{}</title></rect>\n",
                       x, y, cw, ch, colour(d), xml_escape(tip));
      if (wide && std::isfinite(v))
        s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\" fill=\"{}\">{}</text>\n",
                         x + cw / 2, y + ch / 2 + 4, std::fabs(d) > 0.6 ? "white" : "black", value_text(v));
    }
  }
  // Legend: the colour ramp from -50% to +50% of the stage peers' median, and "no data".
  const int lx = 10, lw = 300;
  s += "<defs><linearGradient id=\"ramp\" x1=\"0\" x2=\"1\" y1=\"0\" y2=\"0\">";
  for (int i = 0; i <= 10; i++)
    s += fmt::format("<stop offset=\"{:.1f}\" stop-color=\"{}\"/>", i / 10.0, colour((i - 5) / 5.0));
  s += "</linearGradient></defs>\n";
  s += fmt::format("<text x=\"{}\" y=\"{}\">colour: {} relative to its stage peers' median (differences over "
                   "max(median, {:g} {}))</text>\n",
                   lx, legend_top, h.unit, kHeatColourFloorMs, h.unit);
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"14\" fill=\"url(#ramp)\" stroke=\"#888\"/>\n", lx,
                   legend_top + 8, lw);
  s += fmt::format("<text x=\"{}\" y=\"{}\">-50%</text>\n", lx, legend_top + 36);
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">median</text>\n", lx + lw / 2, legend_top + 36);
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">+50% or more</text>\n", lx + lw, legend_top + 36);
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"#cccccc\" stroke=\"#888\"/>\n", lx + lw + 20,
                   legend_top + 8);
  s += fmt::format("<text x=\"{}\" y=\"{}\">no data</text>\n", lx + lw + 40, legend_top + 20);
  s += "</svg>\n";
  return s;
}

}  // namespace ms
