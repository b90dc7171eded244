// aligned_clock.cpp: see aligned_clock.h.
#include "obs/aligned_clock.h"

#include <atomic>

#include "base/clock.h"  // steady_ns

namespace ms {
namespace {
std::atomic<int64_t> g_offset{0};
std::atomic<int64_t> g_rtt{0};
}  // namespace

void set_clock_offset(ClockOffset o) {
  g_rtt.store(o.rtt_ns, std::memory_order_relaxed);
  g_offset.store(o.offset_ns, std::memory_order_release);
}

ClockOffset clock_offset() {
  return {g_offset.load(std::memory_order_acquire), g_rtt.load(std::memory_order_relaxed)};
}

int64_t to_aligned_ns(int64_t steady) { return steady + g_offset.load(std::memory_order_acquire); }

int64_t aligned_now_ns() { return to_aligned_ns(steady_ns()); }

}  // namespace ms
