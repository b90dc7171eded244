// trace_sink.cpp: see trace_sink.h.
#include "obs/trace_sink.h"

#include <time.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <set>
#include <string>

#include <algorithm>  // std::max

#include "base/clock.h"  // steady_ns

namespace ms {
namespace {

// set_span_hooks: function pointers, so a span reads each with one relaxed load.
std::atomic<void (*)(std::string_view)> g_span_start{nullptr};
std::atomic<void (*)(std::string_view, int64_t)> g_span_end{nullptr};

}  // namespace

void set_span_hooks(SpanHooks hooks) {
  g_span_start.store(hooks.span_start, std::memory_order_release);
  g_span_end.store(hooks.span_end, std::memory_order_release);
}

TraceSink& TraceSink::get() {
  static TraceSink* sink = new TraceSink();  // never destroyed: ops may finish during exit
  return *sink;
}

TraceSink::TraceSink() {
  totals_.reserve(512);
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
  // A collective begins (compute spans: TraceScope): the span_start hook, before any lock.
  if (track == TraceTrack::kComm)
    if (auto* hook = g_span_start.load(std::memory_order_relaxed)) hook(r.seg);
  Ring& g = ring(track);
  r.step = step_.load(std::memory_order_relaxed);
  std::lock_guard lk(g.m);
  if (!g.on) return kNoId;
  uint64_t id;
  claim_slot(g, id) = std::move(r);
  return id;
}

int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void TraceSink::close(TraceTrack track, uint64_t id, int64_t end_ns, std::string_view status, int64_t cpu_ns) {
  if (id == kNoId) return;
  Ring& g = ring(track);
  int step = 0;
  std::string_view seg;
  int64_t ns = -1;
  {
    std::lock_guard lk(g.m);
    if (g.recs.empty() || g.ids[id % g.recs.size()] != id) return;
    TraceRecord& r = g.recs[id % g.recs.size()];
    r.end_ns = end_ns;
    r.cpu_ns = cpu_ns;
    if (!status.empty()) r.status.assign(status.data(), status.size());
    if (r.start_ns > 0 && !r.seg.empty()) step = r.step, seg = r.seg, ns = end_ns - r.start_ns;
  }
  if (ns >= 0) add_total(step, seg, ns, cpu_ns < 0 ? 0 : cpu_ns);
}

void TraceSink::span(std::string_view name, int64_t start_ns, int64_t end_ns) {
  Ring& g = ring(TraceTrack::kCompute);
  const int step = step_.load(std::memory_order_relaxed);
  {
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
    r.seg = span_segment(name);
    r.step = step;
    r.cpu_ns = -1;
  }
  add_total(step, span_segment(name), end_ns - start_ns, 0);
}

void TraceSink::set_step(int step) { step_.store(step, std::memory_order_relaxed); }
int TraceSink::step() const { return step_.load(std::memory_order_relaxed); }

void TraceSink::add_total(int step, std::string_view seg, int64_t ns, int64_t cpu_ns) {
  std::lock_guard lk(totals_m_);
  for (SegmentTotal& t : totals_)
    if (t.step == step && t.seg == seg) {
      t.ns += ns, t.cpu_ns += cpu_ns;
      return;
    }
  totals_.push_back({step, seg, ns, cpu_ns});
}

void TraceSink::take_segment_totals(int step, std::vector<SegmentTotal>& out) {
  out.clear();
  std::lock_guard lk(totals_m_);
  size_t keep = 0;
  for (size_t i = 0; i < totals_.size(); i++) {
    if (totals_[i].step <= step) out.push_back(totals_[i]);
    else totals_[keep++] = totals_[i];
  }
  totals_.resize(keep);
}

uint64_t TraceSink::collect(TraceTrack track, uint64_t& next, std::vector<uint64_t>& pending,
                            std::vector<TraceRecord>& out) const {
  const Ring& g = ring(track);
  std::lock_guard lk(g.m);
  const size_t cap = g.recs.size();
  uint64_t lost = 0;
  size_t keep = 0;
  for (uint64_t id : pending) {  // seen running before: finished now, still running, or overwritten
    if (g.ids[id % cap] != id) { lost++; continue; }
    const TraceRecord& r = g.recs[id % cap];
    if (r.end_ns != 0) out.push_back(r);
    else pending[keep++] = id;
  }
  pending.resize(keep);
  const uint64_t first = g.next_id > cap ? g.next_id - cap : 0;
  if (next < first) lost += first - next, next = first;
  for (; next < g.next_id; next++) {
    const TraceRecord& r = g.recs[next % cap];
    if (r.end_ns != 0) out.push_back(r);
    else pending.push_back(next);
  }
  return lost;
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

std::string_view span_segment(std::string_view name) { return name.substr(0, name.find(' ')); }

std::string_view comm_segment(std::string_view group, std::string_view op) {
  struct Known {
    std::string_view dim, op, seg;
  };
  static std::mutex* m = new std::mutex();  // never destroyed: ops may end during exit
  static std::vector<Known>* known = new std::vector<Known>();
  const std::string_view dim = group.substr(0, group.find('['));
  std::lock_guard lk(*m);
  for (const Known& k : *known)
    if (k.dim == dim && k.op == op) return k.seg;
  std::string seg = std::string(dim) + "-" + std::string(op);
  std::replace(seg.begin() + static_cast<std::ptrdiff_t>(dim.size()) + 1, seg.end(), '_', '-');
  const std::string_view v = intern_name(seg);
  known->push_back({v.substr(0, dim.size()), intern_name(op), v});
  return v;
}

TraceScope::TraceScope(std::string_view name) : id_(TraceSink::kNoId), start_(0), seg_(span_segment(name)) {
  if (auto* hook = g_span_start.load(std::memory_order_relaxed)) hook(seg_);
  TraceSink& sink = TraceSink::get();
  const bool on = sink.enabled(TraceTrack::kCompute);
  if (!on && !g_span_end.load(std::memory_order_relaxed)) return;
  start_ = steady_ns();
  cpu0_ = thread_cpu_ns();
  if (!on) return;
  TraceRecord r;
  r.name = name;
  r.seg = seg_;
  r.enqueue_ns = r.start_ns = start_;
  id_ = sink.open(TraceTrack::kCompute, std::move(r));
}

TraceScope::~TraceScope() {
  if (!start_) return;
  if (auto* hook = g_span_end.load(std::memory_order_relaxed)) hook(seg_, thread_cpu_ns() - cpu0_);
  if (id_ != TraceSink::kNoId)
    TraceSink::get().close(TraceTrack::kCompute, id_, steady_ns(), {}, thread_cpu_ns() - cpu0_);
}

}  // namespace ms
