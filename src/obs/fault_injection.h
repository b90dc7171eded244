// fault_injection: test faults of a training rank, inert unless the environment sets
// MEGASCALE_FAULT (docs/observability.md "Fault injection"): entries separated by ';', fields by ':'
//   slow:rank=R:seg=forward:ratio=0.2[:from=S]  every span of segment `seg` on rank R (from step S
//                                               on) does `ratio` more work: its thread burns ratio x
//                                               the span's CPU time before the span ends (a slower
//                                               processor: wall and CPU time both grow)
//   sleep:rank=R:step=N:seconds=S               rank R sleeps S s at the start of step N, before
//                                               any of the step's communication
//   stop:rank=R:step=N                          rank R stops itself (SIGSTOP) at the start of step N
// A malformed value is an ms::Error naming MEGASCALE_FAULT, the entry and the field. Each injection
// writes a "fault injected" event into the rank's records (once per kind and step range).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

struct FaultSpec {
  std::string kind;    // "slow", "sleep", "stop"
  int rank = -1;
  std::string seg;     // slow
  double ratio = 0;    // slow
  int from = 0;        // slow: first step
  int step = -1;       // sleep, stop
  double seconds = 0;  // sleep
};

// Parses a MEGASCALE_FAULT value.
std::vector<FaultSpec> parse_faults(std::string_view text);

// The faults of this process: parse_faults(getenv("MEGASCALE_FAULT")) kept for `rank` only.
void init_faults(int rank);
// At the start of a step, before its communication: sleep / stop faults.
void fault_at_step_start(int step);
// The extra time a span of segment `seg` that took `ns` must take now (0 = none): slow faults.
int64_t fault_extra_ns(std::string_view seg, int64_t ns);
// Burns cpu_ns of this thread's CPU time (busy work).
void fault_slow_down(int64_t cpu_ns);
// Whether any slow fault is set (callers skip the lookup otherwise).
bool slow_faults_set();

}  // namespace ms
