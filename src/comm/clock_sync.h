// clock_sync: aligns every rank's clock to rank 0's (docs/observability.md): rank 0 and each other
// rank exchange `rounds` timestamp round trips over the world communicator (NTP style: rank r sends
// at t1, rank 0 answers with its steady time t0, rank r receives at t2; offset = t0 - (t1 + t2) / 2);
// the round trip with the smallest duration is kept, so the error is at most half of it. Rank 0's
// offset is 0. A collective over the world: every rank calls it at the same point. Returns this
// rank's offset (obs/aligned_clock.h) without installing it.
#pragma once
#include "comm/communicator.h"
#include "obs/aligned_clock.h"  // ClockOffset

namespace ms {

ClockOffset measure_clock_offset(Communicator& world, int rounds = 8);

}  // namespace ms
