// trace_merge: every rank's records (obs/record_reader.h) merged into one Chrome trace JSON
// (chrome://tracing, Perfetto; `megascale trace`).
//  - one process per world rank, pid = rank, named "rank 5 (pp=1 dp=0 tp=1)", process_sort_index
//    ordering by (pp, dp, tp); a rank without a record file is still a process, named "... missing";
//  - per process the tracks (threads): "steps" (one slice per optimizer step), "compute" (span
//    records), one per communication group ("comm pp[dp=0,tp=0]"); complete ("X") events with args
//    (step, mb, chunk, seq, bytes, group, op, status, ...);
//  - flow arrows (ph "s" / "f", bound to the enclosing slices) from each pipeline send to its recv:
//    send on world rank a with peer_world b, group g, seq s <-> recv on rank b with peer_world a,
//    group g, seq s;
//  - instant events ("i", process scope) for `event` records (checkpoints, faults, errors).
// Guarantees: slices on one track nest properly (each lies inside the previous open slice or after
// it ends); on step and communication tracks they never overlap at all (so a flow binds to exactly
// its op). A slice that would break this goes to an extra track of the same kind ("compute #2",
// "comm pp[dp=0,tp=0] #2", ...), created as needed, so nothing is dropped. Times are microseconds on the
// records' aligned clock (rank 0's origin), shifted so the earliest time is >= 0.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "obs/record_reader.h"  // RunRecords

namespace ms {

struct TraceStats {
  size_t processes = 0;        // ranks, missing ones included
  size_t slices = 0;           // "X" events
  size_t instants = 0;         // "i" events
  size_t flows = 0;            // send -> recv pairs drawn
  size_t unmatched_sends = 0;  // sends whose recv is not in the records (missing rank, run cut short)
  size_t unmatched_recvs = 0;
  size_t overflow_tracks = 0;  // extra tracks opened for overlapping slices
};

// The merged trace: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
nlohmann::json merge_trace(const RunRecords& run, TraceStats* stats = nullptr);

// merge_trace written atomically to `path`.
TraceStats write_merged_trace(const RunRecords& run, const std::string& path);

}  // namespace ms
