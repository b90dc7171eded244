// clock_sync.cpp: see clock_sync.h.
#include "comm/clock_sync.h"

#include <cstdint>
#include <limits>

#include "base/clock.h"  // steady_ns

namespace ms {
namespace {
constexpr uint32_t kPingTag = 0x7c10c000u, kPongTag = 0x7c10c001u;
}

ClockOffset measure_clock_offset(Communicator& world, int rounds) {
  const int n = world.size(), me = world.rank();
  ClockOffset best;
  if (n == 1) return best;
  if (me == 0) {
    for (int r = 1; r < n; r++)
      for (int k = 0; k < rounds; k++) {
        int64_t ping = 0;
        world.recv(&ping, sizeof ping, r, kPingTag);
        const int64_t t0 = steady_ns();
        world.send(&t0, sizeof t0, r, kPongTag);
      }
    return best;
  }
  int64_t best_rtt = std::numeric_limits<int64_t>::max();
  for (int k = 0; k < rounds; k++) {
    const int64_t t1 = steady_ns();
    world.send(&t1, sizeof t1, 0, kPingTag);
    int64_t t0 = 0;
    world.recv(&t0, sizeof t0, 0, kPongTag);
    const int64_t t2 = steady_ns();
    if (t2 - t1 < best_rtt) {
      best_rtt = t2 - t1;
      best.offset_ns = t0 - (t1 + t2) / 2;
      best.rtt_ns = best_rtt;
    }
  }
  return best;
}

}  // namespace ms
