// trace_sink: the one process-wide sink of timed records that the layers above all write into:
// communication ops (comm: every collective and send/recv, always on) and compute spans (train,
// parallel: forward, backward, optimizer, waits; on with obs.records). Readers take snapshots (the
// hang dump) or stream the records (the record files, obs/run_recorder.h).
// Guarantees:
//  - Each track is a bounded ring of the last `capacity` records, so a flood of compute spans never
//    evicts the collectives needed to analyse a hang; once a ring is full, recording allocates
//    nothing beyond the record's own strings (names are string literals or intern_name()s, kept by pointer).
//  - Records are addressed by the id open() returns; an update of an id already overwritten is
//    dropped. Thread-safe (each ring has its own mutex, held for every access): the communication
//    threads (one per communicator), the threads starting ops and the compute threads write
//    concurrently.
//  - Times are steady-clock ns (base/clock.h) on every track, so rows line up.
//  - Segment times: closing a record adds its duration to the total of its (step, segment); the
//    trainer takes a step's totals at its end (take_segment_totals). Steady state allocates nothing.
//  - A reader that streams the records (obs/run_recorder.h) collects each finished record once, in
//    open order except for records that were still running at an earlier collect.
//  - Test faults reach the span path only through SpanHooks (set_span_hooks): the sink knows nothing
//    of faults; obs/fault_injection installs the hooks when a fault needs them. Unset (the default),
//    each span and collective pays one relaxed load and a predictable branch per hook.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

enum class TraceTrack : uint8_t { kCompute = 0, kComm = 1 };

struct TraceRecord {
  std::string_view name;   // span or op name ("forward 0.0", "all_reduce", ...): a string literal or interned
  std::string group;       // comm: the group (Communicator::name()); empty for compute spans
  uint64_t seq = 0;        // comm: per-group sequence number, the same on every member for the same
                           // op (send/recv: counted per peer and direction, the same on both ends)
  size_t bytes = 0;        // comm: payload of this rank
  int peer = -1;           // comm: send/recv peer (group rank), broadcast root, -1 otherwise
  int64_t enqueue_ns = 0;  // comm: start_* called (compute: = start_ns)
  int64_t start_ns = 0;    // began
  int64_t end_ns = 0;      // finished (0 while running)
  int64_t deadline_ns = 0; // comm: must end by then (steady ns; set when it starts; 0 = none): the hang watchdog's input
  std::string status;      // comm: "queued", "running", "ok" or the error text; empty for spans
  std::string_view seg;    // segment: "forward", "optimizer", "tp-all-gather", ... (docs/observability.md)
  int step = 0;            // the optimizer step current when the record was opened (set_step)
  int64_t cpu_ns = -1;     // compute spans: CPU time of the span's thread during the span (-1: not measured)
};

// CPU time consumed by the calling thread, ns (CLOCK_THREAD_CPUTIME_ID).
int64_t thread_cpu_ns();

// The segment of a collective: "<dimension>-<op with dashes>", the dimension being the group name up
// to '[' ("tp[dp=0,pp=1]" + "all_gather" -> "tp-all-gather"). Interned; allocates only when new.
std::string_view comm_segment(std::string_view group, std::string_view op);
// The segment of a compute span: its name up to the first space ("forward 3.1" -> "forward").
std::string_view span_segment(std::string_view name);

class TraceSink {
 public:
  // The process's sink (never destroyed: comm ops may finish during exit).
  static TraceSink& get();

  // Ring size of a track (at least 1); resizing drops what was recorded.
  void set_capacity(TraceTrack track, size_t capacity);
  // Recording on/off per track. Defaults: comm on, compute off.
  void set_enabled(TraceTrack track, bool on);
  bool enabled(TraceTrack track) const;

  // Adds a record to a track (if enabled); returns its id for update(). kNoId when disabled.
  static constexpr uint64_t kNoId = ~0ull;
  uint64_t open(TraceTrack track, TraceRecord r);
  // Applies f(TraceRecord&) to a record still in the ring.
  template <class F>
  void update(TraceTrack track, uint64_t id, F&& f) {
    if (id == kNoId) return;
    Ring& g = ring(track);
    std::lock_guard lk(g.m);
    if (g.recs.empty() || g.ids[id % g.recs.size()] != id) return;
    f(g.recs[id % g.recs.size()]);
  }
  // Ends a record opened by open(): sets end_ns (and status when given) and adds end - start to
  // its (step, segment) total when it started.
  void close(TraceTrack track, uint64_t id, int64_t end_ns, std::string_view status = {}, int64_t cpu_ns = -1);
  // A finished compute span (segment: span_segment(name)).
  void span(std::string_view name, int64_t start_ns, int64_t end_ns);

  // The step that records opened from now on belong to.
  void set_step(int step);
  int step() const;
  // Moves the totals of every step <= step into out (cleared first): (step, segment, ns).
  struct SegmentTotal {
    int step;
    std::string_view seg;
    int64_t ns;
    int64_t cpu_ns;  // compute spans' thread CPU time; 0 for collectives
  };
  void take_segment_totals(int step, std::vector<SegmentTotal>& out);

  // Streaming: appends to out every record of the track that has finished since the last call with
  // the same cursor (next: first id not yet seen; pending: ids seen unfinished). Returns how many
  // records were overwritten before they could be collected.
  uint64_t collect(TraceTrack track, uint64_t& next, std::vector<uint64_t>& pending, std::vector<TraceRecord>& out) const;
  // The track's records, oldest first.
  std::vector<TraceRecord> snapshot(TraceTrack track) const;

 private:
  struct Ring {
    mutable std::mutex m;
    bool on = false;
    std::vector<TraceRecord> recs;
    std::vector<uint64_t> ids;
    uint64_t next_id = 0;
  };
  TraceSink();
  // The slot of the next record of g (its id in `id`); g.m must be held.
  static TraceRecord& claim_slot(Ring& g, uint64_t& id);
  Ring& ring(TraceTrack t) { return rings_[static_cast<int>(t)]; }
  const Ring& ring(TraceTrack t) const { return rings_[static_cast<int>(t)]; }
  Ring rings_[2];
  std::atomic<int> step_{0};
  mutable std::mutex totals_m_;
  std::vector<SegmentTotal> totals_;  // reserved: adding allocates only past its capacity
  void add_total(int step, std::string_view seg, int64_t ns, int64_t cpu_ns);
};

// Hooks into the span path (null: none). `span_start(seg)` runs when a compute span (TraceScope) or a
// collective (open on the comm track) of segment seg begins, before any lock; `span_end(seg, cpu_ns)`
// runs when a compute span that used cpu_ns of its thread's CPU time is about to end (its end time is
// taken after the hook returns, so time the hook spends counts to the span). Set at start-up, before
// the spans they should see; replacing them while spans run is safe (each call sees one or the other).
struct SpanHooks {
  void (*span_start)(std::string_view seg) = nullptr;
  void (*span_end)(std::string_view seg, int64_t cpu_ns) = nullptr;
};
void set_span_hooks(SpanHooks hooks);

// A name that lives until the process ends (for span names built at run time, e.g. "forward 3.1"):
// equal strings give the same view. Thread-safe; allocates only the first time a string is seen.
std::string_view intern_name(std::string_view name);

// RAII compute span: records [construction, destruction) under name when the compute track is on;
// the record is in the ring from the start (end_ns = 0 while it runs: the rank's current segment).
class TraceScope {
 public:
  explicit TraceScope(std::string_view name);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  uint64_t id_;     // TraceSink::kNoId: not recording
  int64_t start_;   // 0: neither recording nor measured for a span_end hook
  int64_t cpu0_;    // thread CPU time at the start
  std::string_view seg_;
};

}  // namespace ms
