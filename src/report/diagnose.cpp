// diagnose.cpp: see diagnose.h.
#include "report/diagnose.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "base/check.h"        // MS_CHECK, MS_FAIL
#include "base/json_fields.h"  // JsonFields

namespace ms {
namespace {

using nlohmann::json;

bool is_p2p(const std::string& op) { return op == "send" || op == "recv"; }
bool is_collective(const std::string& op) {
  return op == "all_reduce" || op == "reduce_scatter" || op == "all_gather" || op == "broadcast" || op == "barrier";
}

struct RingOp {
  std::string op, group, state, status;
  uint64_t seq = 0;
  int peer = -1, peer_world = -1;
  int64_t t0 = 0, deadline = 0;  // aligned ns
};

struct RankDump {
  std::string file, kind, reason;
  int rank = -1, world = 0;
  DiagnoseCoord coord;
  int64_t frozen_ns = 0;
  std::vector<RingOp> ring, stuck;
  std::map<std::string, std::vector<int>> groups;
  std::string segment;  // current compute segment, "" if none
};

DiagnoseCoord coord_of(const JsonFields& c) {
  return DiagnoseCoord{c.get<int>("tp"), c.get<int>("dp"), c.get<int>("pp")};
}

RingOp ring_op(const JsonFields& f, int64_t offset) {
  RingOp o;
  o.op = f.text("op");
  o.group = f.text("group");
  o.state = f.text("state");
  o.status = f.text_or("status", "");
  o.seq = f.get<uint64_t>("seq");
  o.peer = f.get_or<int>("peer", -1), o.peer_world = f.get_or<int>("peer_world", -1);
  // Dumps hold aligned times already; offset only fixes dumps whose clock field says they are raw.
  const int64_t t0 = f.integer_or("t0", 0), deadline = f.integer_or("deadline", 0);
  o.t0 = t0 + (t0 ? offset : 0);
  o.deadline = deadline + (deadline ? offset : 0);
  return o;
}

RankDump parse_dump(const json& j, const std::string& file) {
  MS_CHECK(j.is_object(), "{}: not a JSON object", file);
  const JsonFields f(j, file);
  const int format = f.get<int>("format");
  MS_CHECK(format == 1, "{}: field 'format' is {}, this reader knows format 1", file, format);
  RankDump d;
  d.file = file;
  d.rank = f.get<int>("rank");
  d.world = f.get<int>("world");
  MS_CHECK(d.world >= 1 && d.rank >= 0 && d.rank < d.world, "{}: field 'rank' {} is not a rank of a world of {}", file,
           d.rank, d.world);
  d.kind = f.text("kind");
  d.reason = f.text_or("reason", "");
  if (f.has("coord")) d.coord = coord_of(f.object("coord"));
  d.frozen_ns = f.integer_or("frozen_ns", 0);
  f.read_or_keep("groups", d.groups);
  if (const json* seg = f.find("segment"); seg && seg->is_object())
    d.segment = JsonFields(*seg, file, "segment").text_or("name", "");
  const json& ring = f.array("ring");
  for (size_t i = 0; i < ring.size(); i++)
    d.ring.push_back(ring_op(JsonFields(ring[i], file, fmt::format("ring[{}]", i)), 0));
  if (const json* stuck = f.find("stuck"); stuck && stuck->is_array())
    for (size_t i = 0; i < stuck->size(); i++)
      d.stuck.push_back(ring_op(JsonFields((*stuck)[i], file, fmt::format("stuck[{}]", i)), 0));
  return d;
}

// Coordinates of a world rank from the order string (innermost first) and the shape.
DiagnoseCoord coord_from_layout(int rank, const std::string& order, const DiagnoseCoord& shape) {
  DiagnoseCoord c{0, 0, 0};
  std::stringstream ss(order);
  std::string dim;
  while (std::getline(ss, dim, '-')) {
    int* v = dim == "tp" ? &c.tp : dim == "dp" ? &c.dp : dim == "pp" ? &c.pp : nullptr;
    const int n = dim == "tp" ? shape.tp : dim == "dp" ? shape.dp : dim == "pp" ? shape.pp : 1;
    if (!v || n < 1) return DiagnoseCoord{};
    *v = rank % n;
    rank /= n;
  }
  return c;
}

std::string coord_text(const DiagnoseCoord& c) {
  if (c.tp < 0) return "coordinates unknown";
  return fmt::format("tp={},dp={},pp={}", c.tp, c.dp, c.pp);
}

std::string seconds(int64_t ns) { return fmt::format("{:.1f} s", static_cast<double>(ns) / 1e9); }

// What a rank waits in: ops running, or failed (but not refused because of an earlier failure).
std::vector<RingOp> waits_of(const RankDump& d) {
  std::vector<RingOp> w;
  for (const RingOp& o : d.ring) {
    if (!is_collective(o.op) && !is_p2p(o.op)) continue;
    if (o.state == "running" || (o.state == "error" && o.status.find("unusable after an earlier failure") == std::string::npos))
      w.push_back(o);
  }
  return w;
}

// What diagnose_dumps learns on its way: the dumps, the groups' members, and the wait-for graph.
struct DiagnoseState {
  std::map<int, RankDump> dumps;
  std::map<std::string, std::vector<int>> groups;
  std::map<int, std::set<int>> waits_on;  // waiter -> ranks it waits for (the wait-for graph)
  std::map<int, std::string> why;         // culprit reasons (first found)
  std::set<int> late_or_frozen;
};

// The dumps and the record headers: ranks, coordinates, the layout and every group's members.
void read_dumps(const std::vector<json>& docs, const std::vector<std::string>& names, const std::vector<json>& headers,
                Diagnosis& out, DiagnoseState& st) {
  std::map<int, RankDump>& dumps = st.dumps;
  std::map<std::string, std::vector<int>>& groups = st.groups;
  std::map<int, DiagnoseCoord> known;
  std::string order;
  DiagnoseCoord shape;
  auto learn_layout = [&](const json& j) {
    if (order.empty() && j.contains("order") && j.at("order").is_string()) order = j.at("order").get<std::string>();
    if (shape.tp < 0 && j.contains("shape") && j.at("shape").is_object()) {
      const json& s = j.at("shape");
      shape = DiagnoseCoord{s.value("tp", 1), s.value("dp", 1), s.value("pp", 1)};
    }
    if (j.contains("groups") && j.at("groups").is_object())
      for (auto& [name, m] : j.at("groups").items())
        if (m.is_array()) groups.emplace(name, m.get<std::vector<int>>());
  };
  for (size_t i = 0; i < docs.size(); i++) {
    RankDump d = parse_dump(docs[i], names[i]);
    MS_CHECK(!dumps.count(d.rank), "{}: a second dump of rank {} (the other: {})", names[i], d.rank,
             dumps.at(d.rank).file);
    out.world = std::max(out.world, d.world);
    learn_layout(docs[i]);
    if (d.coord.tp >= 0) known[d.rank] = d.coord;
    dumps.emplace(d.rank, std::move(d));
  }
  for (const json& h : headers) {
    if (!h.is_object() || !h.contains("rank")) continue;
    out.world = std::max(out.world, h.value("world", 0));
    learn_layout(h);
    if (h.contains("coord") && h.at("coord").is_object()) {
      const json& c = h.at("coord");
      known.emplace(h.value("rank", -1), DiagnoseCoord{c.value("tp", -1), c.value("dp", -1), c.value("pp", -1)});
    }
  }
  for (int r = 0; r < out.world; r++) {
    auto k = known.find(r);
    out.coords.push_back(k != known.end() ? k->second : shape.tp > 0 ? coord_from_layout(r, order, shape) : DiagnoseCoord{});
    (dumps.count(r) ? out.dumped : out.no_dump).push_back(r);
  }

  // Stuck in something that is not an op of the ring (MPI_Init_thread, new_group, exit): noted.
  for (const auto& [r, d] : dumps)
    for (const RingOp& s : d.stuck)
      if (!is_collective(s.op) && !is_p2p(s.op))
        out.notes.push_back(fmt::format("rank {} ({}) was stuck in {} on group '{}'", r, coord_text(out.coords[r]), s.op,
                                        s.group));

}

// The sites: each dumped rank's waits, merged per collective (group, op, seq).
void collect_sites(Diagnosis& out, DiagnoseState& st) {
  const std::map<int, RankDump>& dumps = st.dumps;
  const std::map<std::string, std::vector<int>>& groups = st.groups;
  std::map<std::tuple<std::string, std::string, uint64_t, int, int>, size_t> index;
  for (const auto& [r, d] : dumps) {
    for (const RingOp& w : waits_of(d)) {
      auto g = groups.find(w.group);
      if (g == groups.end()) {
        out.notes.push_back(fmt::format("rank {} waits in {} on group '{}' (seq {}), whose members no dump or record "
                                        "header lists", r, w.op, w.group, w.seq));
        continue;
      }
      const std::vector<int>& members = g->second;
      const bool p2p = is_p2p(w.op);
      int other = -1;
      if (p2p) other = w.peer_world >= 0 ? w.peer_world : (w.peer >= 0 && w.peer < static_cast<int>(members.size()) ? members[w.peer] : -1);
      if (p2p && other < 0) continue;
      // A collective is one site for all members; a send / recv is a site per (sender, receiver).
      const int a = p2p ? (w.op == "send" ? r : other) : -1, b = p2p ? (w.op == "send" ? other : r) : -1;
      const auto key = std::make_tuple(w.group, p2p ? std::string("send/recv") : w.op, w.seq, a, b);
      auto [it, added] = index.emplace(key, out.sites.size());
      if (added) {
        WaitSite s;
        s.group = w.group, s.op = p2p ? std::string(w.op) : w.op, s.seq = w.seq, s.peer = p2p ? other : -1;
        s.members = p2p ? std::vector<int>{r, other} : members;
        out.sites.push_back(s);
      }
      WaitSite& site = out.sites[it->second];
      if (std::find(site.waiters.begin(), site.waiters.end(), r) == site.waiters.end()) site.waiters.push_back(r);
    }
  }
}

// Who of each site's members was not in it, and why.
void find_missing(Diagnosis& out, DiagnoseState& st) {
  const std::map<int, RankDump>& dumps = st.dumps;
  const std::map<std::string, std::vector<int>>& groups = st.groups;
  std::map<int, std::set<int>>& waits_on = st.waits_on;
  std::map<int, std::string>& why = st.why;
  std::set<int>& late_or_frozen = st.late_or_frozen;
  for (WaitSite& site : out.sites) {
    int64_t deadline = 0;  // the earliest waiter's deadline (aligned)
    for (int w : site.waiters)
      for (const RingOp& o : waits_of(dumps.at(w)))
        if (o.group == site.group && o.seq == site.seq && o.deadline > 0)
          deadline = deadline == 0 ? o.deadline : std::min(deadline, o.deadline);
    const bool p2p = site.peer >= 0;
    const std::string what = p2p ? fmt::format("{} on '{}' seq {} between ranks {} and {}", site.op, site.group,
                                               site.seq, site.members[0], site.members[1])
                                 : fmt::format("{} on '{}' seq {}", site.op, site.group, site.seq);
    std::vector<int> late_waiters;
    for (int m : site.members) {
      const bool waiting = std::find(site.waiters.begin(), site.waiters.end(), m) != site.waiters.end();
      auto dm = dumps.find(m);
      std::string reason;
      if (dm == dumps.end()) {
        reason = fmt::format("left no dump (a member of {}, which rank(s) {} wait in)", what, fmt::join(site.waiters, ", "));
      } else {
        // Did m enter this (group, seq)? A waiter did. Otherwise, a collective: an op of the group with
        // this seq (started) or a later one; a send / recv: the matching op of the other direction
        // towards the waiter, with this seq or a later one.
        const RankDump& d = dm->second;
        bool entered = false, any = false;
        int64_t entered_at = 0;
        uint64_t last_seq = 0;
        const std::vector<int>& gm = groups.at(site.group);
        if (waiting) {
          entered = true;
          for (const RingOp& o : waits_of(d))
            if (o.group == site.group && o.seq == site.seq && (p2p ? is_p2p(o.op) : o.op == site.op)) entered_at = o.t0;
        } else {
          const int waiter = p2p ? (site.members[0] == m ? site.members[1] : site.members[0]) : -1;
          const std::string want = site.op == "send" ? "recv" : "send";
          for (const RingOp& o : d.ring) {
            if (o.group != site.group || o.state == "queued") continue;
            if (p2p) {
              const int toward = o.peer >= 0 && o.peer < static_cast<int>(gm.size()) ? gm[o.peer] : -1;
              if (o.op != want || toward != waiter) continue;
            } else if (!is_collective(o.op)) {
              continue;
            }
            any = true, last_seq = std::max(last_seq, o.seq);
            if (o.seq == site.seq) entered = true, entered_at = o.t0;
            if (o.seq > site.seq) entered = true;
          }
        }
        if (!entered) {
          reason = fmt::format("never entered {} ({}{})", what,
                               any ? fmt::format("its last op there: seq {}", last_seq) : "no op there in its dump",
                               d.segment.empty() ? "" : fmt::format("; its current segment: {}", d.segment));
        } else if (entered_at > 0 && deadline > 0 && entered_at > deadline) {
          reason = fmt::format("entered {} only {} after the waiters' deadline", what, seconds(entered_at - deadline));
          late_or_frozen.insert(m);
          if (waiting) late_waiters.push_back(m);
        }
      }
      if (reason.empty()) continue;
      site.missing.push_back(m);
      for (int w : site.waiters)
        if (w != m) waits_on[w].insert(m);
      why.emplace(m, reason);
    }
    for (int m : late_waiters) site.waiters.erase(std::find(site.waiters.begin(), site.waiters.end(), m));
  }
}

// Frozen ranks, then the culprits: the ends of the wait-for chains.
void name_culprits(Diagnosis& out, DiagnoseState& st) {
  const std::map<int, RankDump>& dumps = st.dumps;
  std::map<int, std::set<int>>& waits_on = st.waits_on;
  std::map<int, std::string>& why = st.why;
  std::set<int>& late_or_frozen = st.late_or_frozen;
  // Frozen processes among the members of the sites (stopped while the others waited).
  std::set<int> in_sites;
  for (const WaitSite& s : out.sites) in_sites.insert(s.members.begin(), s.members.end());
  for (const auto& [r, d] : dumps)
    if (d.frozen_ns > 0 && in_sites.count(r)) {
      late_or_frozen.insert(r);
      why[r] = fmt::format("its process was not scheduled for {} (stopped or starved) while the others waited{}",
                           seconds(d.frozen_ns), why.count(r) ? "; " + why.at(r) : std::string());
    }
  // Culprits: the ends of the wait-for chains (missing members that are not waiting themselves),
  // and frozen or late ranks.
  std::set<int> culprits;
  for (const auto& [w, targets] : waits_on)
    for (int m : targets) {
      const bool has_dump = dumps.count(m);
      const bool waits_itself = has_dump && !waits_of(dumps.at(m)).empty();
      if (!has_dump || !waits_itself || late_or_frozen.count(m)) culprits.insert(m);
    }
  for (int r : late_or_frozen) culprits.insert(r);
  // A frozen rank (its process not scheduled while the others waited: stopped, or starved) is a
  // root cause by itself; other missing members that are busy rather than waiting are then taken as
  // its consequence (blocked behind it outside the ring, e.g. on shared state, or merely late when
  // every rank was stopped) and named in a note, not as culprits, so that a recovery does not evict
  // their healthy hosts too.
  std::set<int> frozen;
  for (int r : culprits)
    if (dumps.count(r) && dumps.at(r).frozen_ns > 0) frozen.insert(r);
  if (!frozen.empty()) {
    for (auto it = culprits.begin(); it != culprits.end();) {
      if (frozen.count(*it)) {
        ++it;
      } else {
        out.notes.push_back(fmt::format("rank {} also held up a collective ({}), but rank(s) {} froze: taken as a "
                                        "consequence, not named", *it, why[*it], fmt::join(frozen, ", ")));
        it = culprits.erase(it);
      }
    }
  }
  for (int r : culprits)
    out.culprits.push_back({r, r < static_cast<int>(out.coords.size()) ? out.coords[r] : DiagnoseCoord{}, why[r]});
  if (out.sites.empty()) out.notes.push_back("no dump shows a rank waiting in a collective or a send / receive");
  else if (culprits.empty())
    out.notes.push_back("every member of the collectives waited in had entered them: no rank is missing (a deadlock "
                        "among the waiters, or an engine that lost a message)");
}

}  // namespace

Diagnosis diagnose_dumps(const std::vector<json>& docs, const std::vector<std::string>& names,
                         const std::vector<json>& headers) {
  MS_CHECK(docs.size() == names.size(), "diagnose: {} dumps but {} names", docs.size(), names.size());
  Diagnosis out;
  DiagnoseState st;
  read_dumps(docs, names, headers, out, st);
  collect_sites(out, st);
  find_missing(out, st);
  name_culprits(out, st);
  return out;
}

Diagnosis diagnose_run(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const fs::path hang = fs::path(run_dir) / "hang";
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(hang, ec))
    for (const auto& e : fs::directory_iterator(hang))
      if (e.path().extension() == ".json" && e.path().filename().string().rfind("rank-", 0) == 0)
        files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  MS_CHECK(!files.empty(), "{}: no hang dump (rank-RRRRR.json): the run did not hang, or obs.watchdog was off",
           hang.string());
  std::vector<json> docs;
  for (const std::string& f : files) {
    std::ifstream in(f);
    MS_CHECK(in, "{}: cannot open", f);
    try {
      docs.push_back(json::parse(in));
    } catch (const json::exception& e) {
      MS_FAIL("{}: not valid JSON: {}", f, e.what());
    }
  }
  std::vector<json> headers;
  const fs::path rec = fs::path(run_dir) / "records";
  if (fs::is_directory(rec, ec))
    for (const auto& e : fs::directory_iterator(rec)) {
      if (e.path().extension() != ".jsonl") continue;
      std::ifstream in(e.path());
      std::string line;
      if (!std::getline(in, line) || in.eof()) continue;  // no complete first line yet
      const json h = json::parse(line, nullptr, false);
      if (h.is_object() && h.value("type", "") == "header") headers.push_back(h);
    }
  return diagnose_dumps(docs, files, headers);
}

std::string format_diagnosis(const Diagnosis& d) {
  std::string s;
  auto rank_text = [&](int r) {
    return fmt::format("rank {} ({})", r, r >= 0 && r < static_cast<int>(d.coords.size()) ? coord_text(d.coords[r]) : "coordinates unknown");
  };
  auto ranks_text = [&](const std::vector<int>& rs) {
    std::vector<std::string> t;
    for (int r : rs) t.push_back(rank_text(r));
    return rs.empty() ? std::string("none") : fmt::format("{}", fmt::join(t, ", "));
  };
  s += fmt::format("world of {} ranks: {} dump(s); no dump from: {}\n", d.world, d.dumped.size(), ranks_text(d.no_dump));
  for (const WaitSite& w : d.sites) {
    if (w.peer >= 0)
      s += fmt::format("waiting: {} on '{}' seq {} between {} and {}\n", w.op, w.group, w.seq, rank_text(w.members[0]),
                       rank_text(w.members[1]));
    else
      s += fmt::format("waiting: {} on '{}' seq {} (members {})\n", w.op, w.group, w.seq, fmt::join(w.members, ", "));
    s += fmt::format("  waiters: {}\n  not in it: {}\n", ranks_text(w.waiters), ranks_text(w.missing));
  }
  for (const Culprit& c : d.culprits)
    s += fmt::format("culprit: rank {} ({}): {}\n", c.rank, coord_text(c.coord), c.why);
  for (const std::string& n : d.notes) s += "note: " + n + "\n";
  return s;
}

}  // namespace ms
