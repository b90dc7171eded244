// timed_wait: how a parallel wrapper waits on its communication: inside a compute span of the trace
// sink (obs/trace_sink.h) named for what is awaited, returning the seconds the compute thread was
// held (the "exposed" communication each wrapper reports per step). The handle is reset afterwards.
// With a StreamOrder on the GPU (stream_order_of: the model's device and compute stream), the
// model's stream is ordered after the op (CommWork::wait_on: a stream wait on NCCL, so the host
// goes on; a host wait on engines that stage through host memory); on the CPU it is wait().
#pragma once
#include "base/clock.h"         // steady_ns
#include "comm/communicator.h"  // CommWork, StreamOrder
#include "model/gpt.h"          // GPT
#include "kernels/backend.h"    // KernelBackend::stream
#include "obs/trace_sink.h"     // TraceScope

namespace ms {

// The StreamOrder of a model's buffers: its device, and its compute stream as the producer.
inline StreamOrder stream_order_of(const GPT& m) { return {m.device(), m.kernels().stream()}; }

inline double wait_timed(CommWork& w, const char* span_name, const StreamOrder& on = {}) {
  const int64_t t0 = steady_ns();
  {
    TraceScope span(span_name);
    if (on.device == Device::kCuda) w.wait_on(on.after);
    else w.wait();
  }
  w = CommWork();
  return (steady_ns() - t0) * 1e-9;
}

}  // namespace ms
