// straggler.cpp: see straggler.h.
#include "obs/straggler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace ms {
namespace {

double median(std::vector<double>& v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Whether the rank of row r waited no longer than its peers' median in column c (true where the
// table has no wait data for the cell: the condition is then not applied).
bool waits_least(const SegmentTable& t, size_t r, size_t c, std::vector<double>& peers) {
  const size_t S = t.steps.size();
  if (t.wait.size() != t.ranks.size() * S || !std::isfinite(t.wait[r * S + c])) return true;
  peers.clear();
  for (size_t q = 0; q < t.ranks.size(); q++)
    if (q != r && t.peer_class[q] == t.peer_class[r] && std::isfinite(t.wait[q * S + c])) peers.push_back(t.wait[q * S + c]);
  return peers.empty() || t.wait[r * S + c] <= median(peers);
}

}  // namespace

void SegmentTable::resize_nan() {
  ms.assign(ranks.size() * steps.size() * segments.size(), std::numeric_limits<double>::quiet_NaN());
}

void SegmentTable::resize_wait_nan() {
  wait.assign(ranks.size() * steps.size(), std::numeric_limits<double>::quiet_NaN());
}

std::vector<double> peer_ratios(const SegmentTable& t) {
  const size_t R = t.ranks.size(), S = t.steps.size(), G = t.segments.size();
  std::vector<double> out(R * S * G, std::numeric_limits<double>::quiet_NaN());
  std::vector<double> peers;
  for (size_t r = 0; r < R; r++)
    for (size_t c = 0; c < S; c++)
      for (size_t g = 0; g < G; g++) {
        const double mine = t.at(r, c, g);
        if (!std::isfinite(mine)) continue;
        peers.clear();
        for (size_t q = 0; q < R; q++)
          if (q != r && t.peer_class[q] == t.peer_class[r] && std::isfinite(t.at(q, c, g))) peers.push_back(t.at(q, c, g));
        if (peers.empty()) continue;
        const double m = median(peers);
        if (m > 0) out[(r * S + c) * G + g] = mine / m;
      }
  return out;
}

std::vector<Straggler> find_stragglers(const SegmentTable& t, const StragglerOptions& opt) {
  const size_t R = t.ranks.size(), S = t.steps.size(), G = t.segments.size();
  const std::vector<double> ratio = peer_ratios(t);
  const size_t first = S > static_cast<size_t>(opt.window) ? S - opt.window : 0;
  std::vector<Straggler> out;
  std::vector<double> excess, peers;
  for (size_t r = 0; r < R; r++)
    for (size_t g = 0; g < G; g++) {
      Straggler s;
      s.rank = t.ranks[r];
      s.segment = t.segments[g];
      excess.clear();
      const bool wall = s.segment == kComputeSegment;
      const double min_ms = wall ? opt.min_wall_ms : opt.min_ms;
      for (size_t c = first; c < S; c++) {
        const double q = ratio[(r * S + c) * G + g];
        if (!std::isfinite(q) || t.at(r, c, g) / q < min_ms) continue;
        s.judged_steps++;
        excess.push_back(q - 1);
        if (q - 1 > opt.margin && (!wall || waits_least(t, r, c, peers))) {
          s.slow_steps++;
          if (s.worst_step < 0 || q - 1 > s.worst_excess) s.worst_step = t.steps[c], s.worst_excess = q - 1;
        }
      }
      if (s.slow_steps == 0) continue;
      s.median_excess = median(excess);
      // Chronic: slow in at least kChronicShare of the judged steps, once half a window is in
      // (fewer steps, e.g. the first summary's, are too few to tell lag from noise).
      s.chronic = s.slow_steps >= kChronicShare * s.judged_steps && s.judged_steps * 2 >= opt.window;
      out.push_back(s);
    }
  // A rank chronic in a segment is named there; its compute-wall row would say it again.
  std::vector<int> named;
  for (const Straggler& s : out)
    if (s.chronic && s.segment != kComputeSegment) named.push_back(s.rank);
  std::erase_if(out, [&](const Straggler& s) {
    return s.segment == kComputeSegment && std::find(named.begin(), named.end(), s.rank) != named.end();
  });
  std::stable_sort(out.begin(), out.end(), [](const Straggler& a, const Straggler& b) {
    if (a.chronic != b.chronic) return a.chronic;
    return a.chronic ? a.median_excess > b.median_excess : a.worst_excess > b.worst_excess;
  });
  return out;
}

std::string describe(const Straggler& s, std::string_view who) {
  const char* how = s.segment == kComputeSegment ? " in wall time (forward+backward+optimizer)" : "";
  if (s.chronic)
    return fmt::format("straggler: {} {} {:+.0f}% over its peers' median{}, chronic: slow in {}/{} steps", who,
                       s.segment, s.median_excess * 100, how, s.slow_steps, s.judged_steps);
  return fmt::format("one-off stall (not a straggler): {} {} at step {} ({:+.0f}% over its peers' median{}{}), slow in "
                     "{}/{} steps", who, s.segment, s.worst_step, s.worst_excess * 100, how,
                     s.slow_steps > 1 ? ", the worst" : "", s.slow_steps, s.judged_steps);
}

const std::vector<std::string>& judged_segments() {
  static const std::vector<std::string> segs = {"forward", "backward", "optimizer"};
  return segs;
}

const std::vector<std::string>& wait_segments() {
  static const std::vector<std::string> segs = {"wait", "pp"};
  return segs;
}

}  // namespace ms
