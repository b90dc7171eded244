// timed_wait: how a parallel wrapper waits on its communication: inside a compute span of the trace
// sink (obs/trace_sink.h) named for what is awaited, returning the seconds the compute thread was
// held (the "exposed" communication each wrapper reports per step). The handle is reset afterwards.
#pragma once
#include "base/clock.h"         // steady_ns
#include "comm/communicator.h"  // CommWork
#include "obs/trace_sink.h"     // TraceScope

namespace ms {

inline double wait_timed(CommWork& w, const char* span_name) {
  const int64_t t0 = steady_ns();
  {
    TraceScope span(span_name);
    w.wait();
  }
  w = CommWork();
  return (steady_ns() - t0) * 1e-9;
}

}  // namespace ms
