// aligned_clock: the process's offset from its steady clock to the job's aligned clock (rank 0's
// steady clock, measured at start-up by comm/clock_sync.h and re-measured periodically). Every time
// a record file or a dump holds is aligned: aligned_ns = steady_ns + offset. Until an offset is set
// it is 0 (a single process is its own reference). Thread-safe (atomics).
#pragma once
#include <cstdint>

namespace ms {

struct ClockOffset {
  int64_t offset_ns = 0;  // add to this process's steady ns
  int64_t rtt_ns = 0;     // round trip of the exchange it came from (error <= rtt / 2); 0 = not measured
};

void set_clock_offset(ClockOffset o);
ClockOffset clock_offset();
// steady ns (base/clock.h) -> aligned ns.
int64_t to_aligned_ns(int64_t steady);
// Now, aligned.
int64_t aligned_now_ns();

}  // namespace ms
