// timeline: writers of what the trace sink (trace_sink.h) holds.
//  - write_chrome_trace: one rank's compute spans and communication ops as a Chrome trace
//    (chrome://tracing, Perfetto): process = rank, thread 0 = compute, threads 1.. = one row per
//    communication group ("comm tp[dp=0,pp=0]", ...: each group is its own stream); the rows line
//    up (one clock).
//  - write_comm_trace: the communication ring as a JSON array (hang analysis: op, group, seq, bytes,
//    peer, enqueue/start/end ns, status), oldest first.
// Both write atomically (base/atomic_file.h); text from libraries that is not valid UTF-8 is replaced.
#pragma once
#include <string>

namespace ms {

void write_chrome_trace(const std::string& path, int rank);
void write_comm_trace(const std::string& path);

}  // namespace ms
