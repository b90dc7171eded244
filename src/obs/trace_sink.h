// trace_sink: the one process-wide sink of timed records that the layers above all write into:
// communication ops (comm: every collective and send/recv, always on) and compute spans (train,
// parallel: forward, backward, optimizer, waits; on only when a trace is wanted). Readers (the
// Chrome trace writer, the hang dump) take snapshots.
// Guarantees:
//  - Each track is a bounded ring of the last `capacity` records, so a flood of compute spans never
//    evicts the collectives needed to analyse a hang; once a ring is full, recording allocates
//    nothing beyond the record's own strings (names are string literals or intern_name()s, kept by pointer).
//  - Records are addressed by the id open() returns; an update of an id already overwritten is
//    dropped. Thread-safe (each ring has its own mutex, held for every access): the communication
//    threads (one per communicator), the threads starting ops and the compute threads write
//    concurrently.
//  - Times are steady-clock ns (base/clock.h) on every track, so rows line up.
#pragma once
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
  std::string status;      // comm: "queued", "running", "ok" or the error text; empty for spans
};

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
  // A finished compute span.
  void span(std::string_view name, int64_t start_ns, int64_t end_ns);
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
};

// A name that lives until the process ends (for span names built at run time, e.g. "forward 3.1"):
// equal strings give the same view. Thread-safe; allocates only the first time a string is seen.
std::string_view intern_name(std::string_view name);

// RAII compute span: records [construction, destruction) under name when the compute track is on.
class TraceScope {
 public:
  explicit TraceScope(std::string_view name);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  std::string_view name_;
  int64_t start_;  // 0: not recording
};

}  // namespace ms
