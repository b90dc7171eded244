// fault_injection: test faults of a training rank and of its checkpoint saves, inert unless the
// environment sets MEGASCALE_FAULT (docs/observability.md "Fault injection"), the one fault dialect
// and parser (parse_faults): entries separated by ';', fields by ':'
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
//   ckpt:point=P[:rank=R][:step=N]              a checkpoint save passing point P (no rank / step:
//                                               any) acts as ckpt/ckpt_fault.h says (SIGKILL, an
//                                               I/O error, a NaN in the snapshot or 1 s longer)
// Every kind takes attempt=K (applies only when $MEGASCALE_RESTART_COUNT == K; unset counts as 0) or
// attempt=all (every attempt); without it, attempt 0 only: the run a restart driver starts again
// after the fault is clean.
// A malformed value is an ms::Error naming MEGASCALE_FAULT, the entry and the field. Each injection
// logs one stderr line "megascale: warning: fault injected (MEGASCALE_FAULT): <what> at rank R step N
// [seg S] (attempt K; unix_ns T)" and writes the same text as a "fault injected" event into the
// rank's records (flushed before a crash or stop) before it acts (slow: once, when it first applies).
// The trace sink knows nothing of faults: init_faults installs its span hooks (obs/trace_sink.h
// set_span_hooks) only when a crash / hang with seg or a slow fault is set for this rank.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

struct FaultSpec {
  std::string kind;    // "slow", "sleep", "crash", "hang" (also for "stop"), "nan", "exit", "selfcheck", "ckpt"
  int rank = -1;       // ckpt: -1 = any
  std::string seg;     // slow (required); crash, hang (optional: at the span's start, not the step's)
  double ratio = 0;    // slow
  int from = 0;        // slow: first step
  int step = -1;       // sleep, crash, hang, nan, exit; ckpt (-1 = any)
  double seconds = 0;  // sleep
  int code = 1;        // exit
  int host = -1;       // selfcheck
  std::string point;   // ckpt: the checkpoint point (kCkptPoints)
  int attempt = 0;     // the restart attempt it applies to; kAllAttempts: every one
  static constexpr int kAllAttempts = -1;
};

// The points of a checkpoint save a ckpt fault may name, in the order a save passes them
// (ckpt/ckpt_fault.h says what each does).
inline constexpr std::string_view kCkptPoints[] = {"slow_copy", "stage1",      "nan_state",      "slow_write",
                                                   "mid_file",  "write_error", "before_publish", "before_latest",
                                                   "mem_copy",  "mem_send",    "mem_flip",       "slow_send"};

// Parses a MEGASCALE_FAULT value (every entry validated).
std::vector<FaultSpec> parse_faults(std::string_view text);
// parse_faults($MEGASCALE_FAULT): empty when unset or empty.
std::vector<FaultSpec> env_faults();

// $MEGASCALE_RESTART_COUNT (set by a restart driver: 0 on the first attempt): 0 when unset or
// empty; anything but a number >= 0 is an ms::Error naming the variable.
int restart_attempt();
// Whether a fault with this `attempt` field applies to attempt `current`.
inline bool attempt_applies(int attempt, int current) {
  return attempt == FaultSpec::kAllAttempts || attempt == current;
}

// Logs "fault injected (MEGASCALE_FAULT): <what> <where> (attempt K; unix_ns T)" and writes the same
// text as a "fault injected" event, flushed to the record file (the process may never write again).
void announce_fault(std::string_view what, std::string_view where, int attempt);

// The faults of this process: env_faults() kept for `rank` and this attempt only (selfcheck and ckpt
// faults are asked for where they act); installs or removes the trace sink's span hooks.
void init_faults(int rank);
// At the start of a step, before its communication: sleep, exit, and crash / hang without seg.
void fault_at_step_start(int step);
// Whether rank's local loss of `step` must become NaN (nan faults; announces it).
bool fault_nan_loss(int step);
// Whether the self-check of host `host_index` must fail (selfcheck faults of this attempt). Reads
// MEGASCALE_FAULT itself (no init_faults needed); announces it when true.
bool fault_fails_selfcheck(int host_index);

// Whether init_faults installed the span_start hook (a crash / hang with seg for this rank) / the
// span_end hook (a slow fault for this rank).
bool span_faults_set();
bool slow_faults_set();

}  // namespace ms
