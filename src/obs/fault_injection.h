// fault_injection: test faults of a training rank, inert unless the environment sets
// MEGASCALE_FAULT (docs/observability.md "Fault injection"): entries separated by ';', fields by ':'
//   slow:rank=R:seg=forward:ratio=0.2[:from=S]  every span of segment `seg` on rank R (from step S
//                                               on) does `ratio` more work: its thread burns ratio x
//                                               the span's CPU time before the span ends (a slower
//                                               processor: wall and CPU time both grow)
//   sleep:rank=R:step=N:seconds=S               rank R sleeps S s at the start of step N, before
//                                               any of the step's communication
//   crash:rank=R:step=N[:seg=S]                 rank R kills itself with SIGKILL (a lost machine) at
//                                               the start of step N, or with seg, when the first
//                                               span of segment S of step N begins (compute spans:
//                                               forward, backward, optimizer, data, ...; collectives:
//                                               dp-reduce-scatter, tp-all-gather, ...)
//   hang:rank=R:step=N[:seg=S]                  the same places; the rank stops itself (SIGSTOP: a
//   stop:rank=R:step=N[:seg=S]                  hung process). `stop` is another name for `hang`
//   nan:rank=R:step=N                           rank R's local loss of step N is NaN (the trainer's
//                                               non-finite check stops every rank; train/trainer.cpp)
//   exit:rank=R:step=N[:code=C]                 at the start of step N rank R fails: C = 1 (default)
//                                               throws ms::Error("injected failure ...") through the
//                                               normal error path (logged, exit code 1, as a
//                                               deterministic software bug); another C ends the
//                                               process at once with _exit(C)
//   selfcheck:host=H                            inert in training: fault_fails_selfcheck(H) is true
// Every kind takes attempt=K (applies only when $MEGASCALE_RESTART_COUNT == K; unset counts as 0) or
// attempt=all (every attempt); without it, attempt 0 only: the run a restart driver starts again
// after the fault is clean.
// A malformed value is an ms::Error naming MEGASCALE_FAULT, the entry and the field. Each injection
// logs one stderr line "megascale: warning: fault injected (MEGASCALE_FAULT): <what> at rank R step N
// [seg S] (attempt K; unix_ns T)" and writes the same text as a "fault injected" event into the
// rank's records (flushed before a crash or stop) before it acts (slow: once, when it first applies).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

struct FaultSpec {
  std::string kind;    // "slow", "sleep", "crash", "hang" (also for "stop"), "nan", "exit", "selfcheck"
  int rank = -1;
  std::string seg;     // slow (required); crash, hang (optional: at the span's start, not the step's)
  double ratio = 0;    // slow
  int from = 0;        // slow: first step
  int step = -1;       // sleep, crash, hang, nan, exit
  double seconds = 0;  // sleep
  int code = 1;        // exit
  int host = -1;       // selfcheck
  int attempt = 0;     // the restart attempt it applies to; kAllAttempts: every one
  static constexpr int kAllAttempts = -1;
};

// Parses a MEGASCALE_FAULT value.
std::vector<FaultSpec> parse_faults(std::string_view text);

// $MEGASCALE_RESTART_COUNT (set by a restart driver: 0 on the first attempt): 0 when unset or
// empty; anything but a number >= 0 is an ms::Error naming the variable.
int restart_attempt();
// Whether a fault with this `attempt` field applies to attempt `current`.
inline bool attempt_applies(int attempt, int current) {
  return attempt == FaultSpec::kAllAttempts || attempt == current;
}
// Parses an attempt=... value ("all" or a number >= 0) of `entry` in environment variable `var`.
int parse_attempt(std::string_view var, std::string_view entry, std::string_view value);

// The faults of this process: parse_faults(getenv("MEGASCALE_FAULT")) kept for `rank` and this
// attempt only.
void init_faults(int rank);
// At the start of a step, before its communication: sleep, exit, and crash / hang without seg.
void fault_at_step_start(int step);
// Whether rank's local loss of `step` must become NaN (nan faults; announces it).
bool fault_nan_loss(int step);
// Whether the self-check of host `host_index` must fail (selfcheck faults of this attempt). Reads
// MEGASCALE_FAULT itself (no init_faults needed); announces it when true.
bool fault_fails_selfcheck(int host_index);

// Whether any crash / hang fault with a segment is set for this rank: the span hot path's one
// relaxed load (trace_sink.cpp); fault_at_span_start does the rest.
namespace fault_detail {
inline std::atomic<bool> span_faults{false};
}
inline bool span_faults_set() { return fault_detail::span_faults.load(std::memory_order_relaxed); }
// A span (or collective) of segment `seg` begins in the trace sink's current step: crash / hang
// faults with that seg and step act (once each).
void fault_at_span_start(std::string_view seg);

// The extra time a span of segment `seg` that took `ns` must take now (0 = none): slow faults.
int64_t fault_extra_ns(std::string_view seg, int64_t ns);
// Burns cpu_ns of this thread's CPU time (busy work).
void fault_slow_down(int64_t cpu_ns);
// Whether any slow fault is set (callers skip the lookup otherwise).
bool slow_faults_set();

}  // namespace ms
