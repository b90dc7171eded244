// ckpt_fault: fault injection points of the checkpoint path, inert unless the environment sets
// MEGASCALE_CKPT_FAULT="<point>[:rank=<r>][:step=<n>][:attempt=<k>|all][,...]" (no rank / step: any).
// At a matching point the process kills itself with SIGKILL (as a lost machine would), except
// `write_error`, which raises an I/O error in the writer (as a full disk would), `nan_state`, which
// puts a NaN into the snapshot (as a corrupted optimizer state would), and `slow_write` /
// `slow_copy`, which make the writer / the stage-1 copy take 1 s longer.
// attempt (as MEGASCALE_FAULT's, obs/fault_injection.h): an entry applies only when
// $MEGASCALE_RESTART_COUNT (unset: 0) equals k; attempt=all on every attempt; default attempt 0.
// Points, in the order a save passes them:
//   slow_copy       before the stage-1 copy (copier thread, beside the next step)
//   stage1          during the stage-1 copy into the snapshot buffer (copier thread)
//   nan_state       after the stage-1 copy (copier thread)
//   slow_write      before the rank's file is written (background writer)
//   mid_file        halfway through writing the rank's file (background writer)
//   write_error     before the rank's file is written (background writer)
//   before_publish  rank 0, manifest written, folder not yet renamed into place
//   before_latest   rank 0, folder published, `latest` not yet updated
// A malformed value (unknown point or field, a field that is not a number) is an ms::Error naming
// MEGASCALE_CKPT_FAULT and the entry.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ms {

struct CkptFaultSpec {
  std::string point;
  int rank = -1;    // -1: any
  int step = -1;    // -1: any
  int attempt = 0;  // FaultSpec::kAllAttempts: every attempt
};

// Parses a MEGASCALE_CKPT_FAULT value (every entry validated).
std::vector<CkptFaultSpec> parse_ckpt_faults(std::string_view text);
// Validates $MEGASCALE_CKPT_FAULT (and $MEGASCALE_RESTART_COUNT) now, so a malformed value fails on
// the calling thread rather than later on a checkpoint thread.
void check_ckpt_fault_env();

// Acts (see above) if the environment names this point, rank and step for this attempt; returns
// whether it matched.
bool ckpt_fault_point(const char* point, int rank, int step);

}  // namespace ms
