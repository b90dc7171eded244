// trace_merge.cpp: see trace_merge.h.
#include "report/trace_merge.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "base/atomic_file.h"  // write_text_atomic

namespace ms {

using nlohmann::json;

namespace {

// One slice before it is given a track.
struct Slice {
  int64_t t0 = 0, t1 = 0;
  json ev;  // the "X" event without "tid"
};

// The tracks (threads) of one process; each kind ("steps", "compute", "comm <group>") may spill into
// extra tracks when its slices overlap.
class Tracks {
 public:
  Tracks(int pid, json& events, TraceStats& stats) : pid_(pid), events_(events), stats_(stats) {}

  // Places every slice of one kind on the kind's tracks: the first track where it nests inside the
  // open slice (nest = false: where no slice is open, i.e. never overlapping). Returns per slice its
  // tid (same order as `slices`).
  std::vector<int> place(const std::string& kind, std::vector<Slice>& slices, bool nest) {
    std::vector<size_t> order(slices.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::tie(slices[a].t0, slices[b].t1) < std::tie(slices[b].t0, slices[a].t1);  // outer first
    });
    struct Track {
      int tid;
      std::vector<int64_t> open;  // end times of the open slices, innermost last
    };
    std::vector<Track> tracks;
    std::vector<int> tids(slices.size(), -1);
    for (size_t i : order) {
      const Slice& s = slices[i];
      Track* home = nullptr;
      for (Track& t : tracks) {
        while (!t.open.empty() && t.open.back() <= s.t0) t.open.pop_back();
        if (t.open.empty() || (nest && t.open.back() >= s.t1)) {
          home = &t;
          break;
        }
      }
      if (!home) {
        const int n = static_cast<int>(tracks.size());
        tracks.push_back({new_track(n == 0 ? kind : fmt::format("{} #{}", kind, n + 1)), {}});
        if (n > 0) stats_.overflow_tracks++;
        home = &tracks.back();
      }
      home->open.push_back(s.t1);
      tids[i] = home->tid;
    }
    return tids;
  }

 private:
  int new_track(const std::string& name) {
    const int tid = next_tid_++;
    events_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid_}, {"tid", tid}, {"args", {{"name", name}}}});
    events_.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid_}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
    return tid;
  }

  int pid_;
  json& events_;
  TraceStats& stats_;
  int next_tid_ = 1;
};

// Identity of a point-to-point transfer: (source world rank, destination world rank, group, seq).
using FlowKey = std::tuple<int, int, std::string, int64_t>;

struct FlowEnd {
  int pid = -1, tid = -1;
  double ts = 0;  // inside the slice, where the arrow attaches
};

// Origin: the earliest time in the records when it is negative (Perfetto dislikes negative times).
int64_t trace_origin(const RunRecords& run) {
  int64_t origin = 0;
  for (const RankRecords& r : run.ranks) {
    for (const SpanRecord& s : r.spans) origin = std::min(origin, s.t0);
    for (const CommRecord& c : r.comms) origin = std::min(origin, c.t0);
    for (const RecordedStep& s : r.steps) origin = std::min(origin, s.t0);
    for (const EventRecord& e : r.events) origin = std::min(origin, e.t);
  }
  return origin;
}

// Flows: each send -> its recv (an arrow between the two slices); the unmatched ones counted.
void add_flows(const std::map<FlowKey, FlowEnd>& sends, const std::map<FlowKey, FlowEnd>& recvs, json& events,
               TraceStats& stats) {
  uint64_t next_id = 1;
  for (const auto& [key, s] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end()) {
      stats.unmatched_sends++;
      continue;
    }
    const FlowEnd& f = it->second;
    const json args = {{"src", std::get<0>(key)}, {"dst", std::get<1>(key)}, {"group", std::get<2>(key)},
                       {"seq", std::get<3>(key)}};
    events.push_back({{"name", "p2p"}, {"cat", "flow"}, {"ph", "s"}, {"id", next_id}, {"pid", s.pid}, {"tid", s.tid},
                      {"ts", s.ts}, {"args", args}});
    events.push_back({{"name", "p2p"}, {"cat", "flow"}, {"ph", "f"}, {"bp", "e"}, {"id", next_id}, {"pid", f.pid},
                      {"tid", f.tid}, {"ts", f.ts}, {"args", args}});
    next_id++;
    stats.flows++;
  }
  for (const auto& [key, f] : recvs)
    if (!sends.count(key)) stats.unmatched_recvs++;

}

}  // namespace

json merge_trace(const RunRecords& run, TraceStats* stats_out) {
  TraceStats stats;
  json events = json::array();
  const RankCoord shape = run.shape();
  const std::string order = run.order();

  const int64_t origin = trace_origin(run);
  auto us = [origin](int64_t ns) { return static_cast<double>(ns - origin) / 1000.0; };
  auto dur_us = [](int64_t t0, int64_t t1) { return static_cast<double>(t1 - t0) / 1000.0; };
  auto mid_us = [&](int64_t t0, int64_t t1) { return us(t0) + dur_us(t0, t1) / 2; };

  auto process_meta = [&](int rank, const RankCoord& c, const std::string& name) {
    const int sort = (c.pp * shape.dp + c.dp) * shape.tp + c.tp;
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", name}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"args", {{"sort_index", sort}}}});
    stats.processes++;
  };
  for (int rank : run.missing)
    process_meta(rank, coord_of_rank(rank, shape, order),
                 rank_label(rank, coord_of_rank(rank, shape, order)) + " missing: no record file");

  // Sends and recvs seen so far, and the flow id each transfer gets.
  std::map<FlowKey, FlowEnd> sends, recvs;

  for (const RankRecords& r : run.ranks) {
    const int pid = r.rank;
    const RankCoord c = r.has_header ? r.header.coord : coord_of_rank(r.rank, shape, order);
    process_meta(pid, c, r.has_header ? r.label() : rank_label(r.rank, c) + " (no header yet)");
    Tracks tracks(pid, events, stats);
    auto emit = [&](const std::string& kind, std::vector<Slice>& slices, bool nest) {
      const std::vector<int> tids = tracks.place(kind, slices, nest);
      for (size_t i = 0; i < slices.size(); i++) {
        slices[i].ev["tid"] = tids[i];
        events.push_back(std::move(slices[i].ev));
        stats.slices++;
      }
      return tids;
    };

    // Steps.
    std::vector<Slice> steps;
    for (const RecordedStep& s : r.steps) {
      json args = {{"step", s.step}, {"lr", s.lr}, {"tokens_per_s", s.tokens_per_s}, {"mfu", s.mfu},
                   {"mfu_gemm", s.mfu_gemm}};
      if (s.loss) args["loss"] = *s.loss;
      for (const auto& [seg, ms] : s.ms) args["ms " + seg] = ms;
      steps.push_back({s.t0, s.t1,
                       {{"name", fmt::format("step {}", s.step)}, {"cat", "step"}, {"ph", "X"}, {"pid", pid},
                        {"ts", us(s.t0)}, {"dur", dur_us(s.t0, s.t1)}, {"args", args}}});
    }
    emit("steps", steps, false);

    // Compute spans.
    std::vector<Slice> spans;
    for (const SpanRecord& s : r.spans) {
      json args = {{"step", s.step}, {"seg", s.seg}};
      if (s.mb >= 0) args["mb"] = s.mb;
      if (s.chunk >= 0) args["chunk"] = s.chunk;
      spans.push_back({s.t0, s.t1,
                       {{"name", s.name}, {"cat", s.seg}, {"ph", "X"}, {"pid", pid}, {"ts", us(s.t0)},
                        {"dur", dur_us(s.t0, s.t1)}, {"args", args}}});
    }
    emit("compute", spans, true);

    // Collectives, one track (or more, when they overlap) per group.
    std::map<std::string, std::vector<const CommRecord*>> by_group;
    for (const CommRecord& cr : r.comms) by_group[cr.group].push_back(&cr);
    for (const auto& [group, ops] : by_group) {
      std::vector<Slice> slices;
      for (const CommRecord* o : ops) {
        json args = {{"step", o->step}, {"op", o->op}, {"group", o->group}, {"seq", o->seq}, {"bytes", o->bytes},
                     {"status", o->status}, {"queued_us", dur_us(o->tq, o->t0)}};
        if (o->peer_world >= 0) args["peer_world"] = o->peer_world;
        if (o->peer >= 0) args["peer"] = o->peer;
        slices.push_back({o->t0, o->t1,
                          {{"name", o->op}, {"cat", o->seg}, {"ph", "X"}, {"pid", pid}, {"ts", us(o->t0)},
                           {"dur", dur_us(o->t0, o->t1)}, {"args", args}}});
      }
      // Ops of one group never nest: an overlapping one (an asynchronous op beside another) goes
      // to an extra track, so each flow arrow binds to exactly its op.
      const std::vector<int> tids = emit("comm " + group, slices, false);
      for (size_t i = 0; i < ops.size(); i++) {
        const CommRecord& o = *ops[i];
        if (o.peer_world < 0 || (o.op != "send" && o.op != "recv")) continue;
        const FlowEnd end{pid, tids[i], mid_us(o.t0, o.t1)};
        if (o.op == "send") sends[{r.rank, o.peer_world, o.group, o.seq}] = end;
        else recvs[{o.peer_world, r.rank, o.group, o.seq}] = end;
      }
    }

    // Events.
    for (const EventRecord& e : r.events) {
      events.push_back({{"name", e.name}, {"cat", "event"}, {"ph", "i"}, {"s", "p"}, {"pid", pid}, {"tid", 0},
                        {"ts", us(e.t)}, {"args", {{"step", e.step}, {"detail", e.detail}}}});
      stats.instants++;
    }
  }

  add_flows(sends, recvs, events, stats);

  if (stats_out) *stats_out = stats;
  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"records_dir", run.records_dir}, {"world", run.world}, {"missing_ranks", run.missing},
            {"origin_ns", origin}, {"flows", stats.flows}, {"unmatched_sends", stats.unmatched_sends},
            {"unmatched_recvs", stats.unmatched_recvs}}}};
}

TraceStats write_merged_trace(const RunRecords& run, const std::string& path) {
  TraceStats stats;
  const json doc = merge_trace(run, &stats);
  // Names from the records may hold arbitrary bytes (error texts): replace invalid UTF-8.
  write_text_atomic(path, doc.dump(-1, ' ', false, json::error_handler_t::replace) + "\n");
  return stats;
}

}  // namespace ms
