// ckpt_fault: fault injection points of the checkpoint path, inert unless $MEGASCALE_FAULT (the one
// fault dialect, parsed by obs/fault_injection.h) holds a `ckpt:point=<point>[:rank=R][:step=N]
// [:attempt=K|all]` entry (no rank / step: any). At a matching point the process kills itself with
// SIGKILL (as a lost machine would), except `write_error`, which raises an I/O error in the writer
// (as a full disk would), `nan_state`, which puts a NaN into the snapshot (as a corrupted optimizer
// state would), `slow_write` / `slow_copy`, which make the writer / the stage-1 copy take 1 s
// longer, and `slow_send`, which holds an in-memory replication round 3 s (as a slow link would).
// The attempt rule is MEGASCALE_FAULT's: an entry applies only when $MEGASCALE_RESTART_COUNT
// (unset: 0) equals K; attempt=all on every attempt; default attempt 0.
// Points, in the order a save passes them (obs/fault_injection.h kCkptPoints):
//   slow_copy       before the stage-1 copy (copier thread, beside the next step)
//   stage1          during the stage-1 copy into the snapshot buffer (copier thread)
//   nan_state       after the stage-1 copy (copier thread)
//   slow_write      before the rank's file is written (background writer)
//   mid_file        halfway through writing the rank's file (background writer)
//   write_error     before the rank's file is written (background writer)
//   before_publish  rank 0, manifest written, folder not yet renamed into place
//   before_latest   rank 0, folder published, `latest` not yet updated
// and of an in-memory snapshot (memory_checkpointer.h):
//   mem_copy        during the copy of the state into the rank's snapshot (its worker thread)
//   mem_send        during the replication: headers exchanged, payloads not (the worker thread)
//   mem_flip        a holder has just completed a replica: one payload byte is flipped (as a bad
//                   DIMM would), so the replica no longer matches its XXH64 (no kill)
//   slow_send       during the replication, after the headers (the worker thread; a 3 s pause)
// Each injection logs "fault injected (MEGASCALE_FAULT): checkpoint <point> at rank R step N ..."
// and records it as a "fault injected" event before it acts.
#pragma once

namespace ms {

// Validates $MEGASCALE_FAULT (and $MEGASCALE_RESTART_COUNT) now, so a malformed value fails on the
// calling thread rather than later on a checkpoint thread; a set $MEGASCALE_CKPT_FAULT (the retired
// spelling) is an ms::Error saying how to write it now.
void check_ckpt_fault_env();

// Acts (see above) if $MEGASCALE_FAULT names this point, rank and step for this attempt; returns
// whether it matched.
bool ckpt_fault_point(const char* point, int rank, int step);

}  // namespace ms
