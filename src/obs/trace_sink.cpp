// trace_sink.cpp: see trace_sink.h.
#include "obs/trace_sink.h"

#include <mutex>
#include <set>
#include <string>

#include <algorithm>  // std::max

#include "base/clock.h"  // steady_ns

namespace ms {

TraceSink& TraceSink::get() {
  static TraceSink* sink = new TraceSink();  // never destroyed: ops may finish during exit
  return *sink;
}

TraceSink::TraceSink() {
  set_capacity(TraceTrack::kCompute, 65536);
  set_capacity(TraceTrack::kComm, 4096);
  ring(TraceTrack::kComm).on = true;
}

void TraceSink::set_capacity(TraceTrack track, size_t capacity) {
  Ring& g = ring(track);
  std::lock_guard lk(g.m);
  capacity = std::max<size_t>(capacity, 1);
  if (capacity == g.recs.size()) return;
  g.recs.assign(capacity, TraceRecord{});
  g.ids.assign(capacity, kNoId);
}

void TraceSink::set_enabled(TraceTrack track, bool on) {
  Ring& g = ring(track);
  std::lock_guard lk(g.m);
  g.on = on;
}

bool TraceSink::enabled(TraceTrack track) const {
  const Ring& g = ring(track);
  std::lock_guard lk(g.m);
  return g.on;
}

TraceRecord& TraceSink::claim_slot(Ring& g, uint64_t& id) {
  id = g.next_id++;
  const size_t slot = id % g.recs.size();
  g.ids[slot] = id;
  return g.recs[slot];
}

uint64_t TraceSink::open(TraceTrack track, TraceRecord r) {
  Ring& g = ring(track);
  std::lock_guard lk(g.m);
  if (!g.on) return kNoId;
  uint64_t id;
  claim_slot(g, id) = std::move(r);
  return id;
}

void TraceSink::span(std::string_view name, int64_t start_ns, int64_t end_ns) {
  Ring& g = ring(TraceTrack::kCompute);
  std::lock_guard lk(g.m);
  if (!g.on) return;
  uint64_t id;
  TraceRecord& r = claim_slot(g, id);  // assigned field by field: reuses the slot's storage
  r.name = name;
  r.group.clear();
  r.seq = id;
  r.bytes = 0;
  r.peer = -1;
  r.enqueue_ns = r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.status.clear();
}

std::vector<TraceRecord> TraceSink::snapshot(TraceTrack track) const {
  const Ring& g = ring(track);
  std::lock_guard lk(g.m);
  std::vector<TraceRecord> out;
  const size_t cap = g.recs.size();
  const uint64_t first = g.next_id > cap ? g.next_id - cap : 0;
  for (uint64_t id = first; id < g.next_id; id++)
    if (g.ids[id % cap] == id) out.push_back(g.recs[id % cap]);
  return out;
}

std::string_view intern_name(std::string_view name) {
  static std::mutex* m = new std::mutex();                  // never destroyed: spans may end during exit
  static std::set<std::string, std::less<>>* names = new std::set<std::string, std::less<>>();
  std::lock_guard lk(*m);
  auto it = names->find(name);
  if (it == names->end()) it = names->emplace(name).first;
  return *it;
}

TraceScope::TraceScope(std::string_view name)
    : name_(name), start_(TraceSink::get().enabled(TraceTrack::kCompute) ? steady_ns() : 0) {}

TraceScope::~TraceScope() {
  if (start_) TraceSink::get().span(name_, start_, steady_ns());
}

}  // namespace ms
