// hang_dump: one rank's account of a hang, written by the watchdog (obs/watchdog.h) into
// <out_dir>/hang/rank-RRRRR.json and read by `megascale diagnose` (report/diagnose.h).
// A dump holds who the rank is (obs/rank_identity.h: world rank and size, (tp, dp, pp), grid shape and
// order, host, pid, backend, every group it belongs to with its members' world ranks), why it was
// written (kind + reason), its current compute segment, the communication ops past their deadline, and
// its recent communication ops (the comm ring of obs/trace_sink.h: op, group, seq, state, peer, times).
// Guarantees:
//  - The file is written atomically (base/atomic_file.h): a reader sees a complete dump or none.
//  - Times are aligned ns (obs/aligned_clock.h: steady ns + the clock offset, which the dump also
//    states), so dumps of different ranks compare; `frozen_ns` says how long the rank's watchdog was
//    not scheduled before the dump (a stopped or starved process).
//  - Nothing here allocates beyond the JSON it builds; safe to call from any thread.
// docs/observability.md "Hang localization" describes every field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "obs/rank_identity.h"  // RankIdentity
#include "obs/trace_sink.h"     // TraceRecord

namespace ms {

// Why a dump was written.
enum class HangDumpKind : uint8_t {
  kSuspect,    // an op has used half its time: provisional, removed when the op ends in time
  kSignal,     // SIGTERM / SIGINT reached the rank (the launcher ends the job): the first such dump is kept
  kTimeout,    // the watchdog saw an op past its deadline + grace: the rank ends (exit code 86)
  kCommError,  // an op failed (timeout, dead peer): the rank ends (exit code 86)
};
const char* hang_dump_kind_name(HangDumpKind k);  // "suspect", "signal", "timeout", "comm_error"

// Exit code of a rank that ended because of a communication timeout, failure or hang.
constexpr int kHangExitCode = 86;

struct HangDumpInput {
  HangDumpKind kind = HangDumpKind::kSuspect;
  std::string reason;                  // one line: what happened
  int64_t now_ns = 0;                  // steady ns of the dump
  int64_t frozen_ns = 0;               // longest gap between the watchdog's ticks (0: none noticed)
  int64_t frozen_end_ns = 0;           // steady ns at the end of that gap
  int fallback_rank = 0;               // world rank when no identity was set (before the grid exists)
  int fallback_world = 1;
  std::vector<TraceRecord> comm;       // the comm ring, oldest first
  std::vector<TraceRecord> compute;    // the compute ring, oldest first
  std::vector<TraceRecord> stuck;      // the ops that caused the dump (past deadline, or failed)
  size_t max_ring = 512;               // newest comm records kept in the dump
};

// "<out_dir>/hang/rank-RRRRR.json" (five-digit world rank).
std::string hang_dump_path(const std::string& out_dir, int rank);
// The dump document (format 1).
nlohmann::json make_hang_dump(const HangDumpInput& in);
// One comm record as it appears in a dump's "ring" and "stuck" lists (peer_world from the identity's groups).
nlohmann::json hang_op_json(const TraceRecord& r, const RankIdentity& id, int64_t offset_ns);
// The state of a comm record: "queued", "running", "ok" or "error".
const char* comm_record_state(const TraceRecord& r);
// Writes doc to path atomically (creating the folder); throws ms::Error naming the file.
void write_hang_dump(const std::string& path, const nlohmann::json& doc);

}  // namespace ms
