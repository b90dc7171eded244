// clock: the one monotonic clock of megascale. Every timestamp that is compared across components
// (trace records, compute spans, step times, deadlines) is steady-clock nanoseconds from here.
#pragma once
#include <chrono>
#include <cstdint>

namespace ms {

using SteadyClock = std::chrono::steady_clock;

// Now, in steady-clock nanoseconds.
inline int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch()).count();
}

// Now, in steady-clock seconds (benchmarks subtract two of these).
inline double steady_seconds() { return std::chrono::duration<double>(SteadyClock::now().time_since_epoch()).count(); }

// Seconds elapsed since t0 (a SteadyClock time point).
inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// Wall time of a piece of code: construct, then seconds().
class Stopwatch {
 public:
  Stopwatch() : t0_(SteadyClock::now()) {}
  double seconds() const { return seconds_since(t0_); }
  void restart() { t0_ = SteadyClock::now(); }

 private:
  SteadyClock::time_point t0_;
};

}  // namespace ms
