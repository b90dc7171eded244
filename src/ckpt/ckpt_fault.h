// ckpt_fault: fault injection points of the checkpoint path, inert unless the environment sets
// MEGASCALE_CKPT_FAULT="<point>:rank=<r>:step=<n>[,...]". At a matching point the process kills
// itself with SIGKILL (as a lost machine would), except `write_error`, which raises an I/O error in
// the writer (as a full disk would). Points, in the order a save passes them:
//   stage1          during the stage-1 copy into the snapshot buffer (training thread)
//   mid_file        halfway through writing the rank's file (background writer)
//   write_error     before the rank's file is written (background writer)
//   before_publish  rank 0, manifest written, folder not yet renamed into place
//   before_latest   rank 0, folder published, `latest` not yet updated
#pragma once

namespace ms {

// Kills the process (or throws, for write_error) if the environment names this point, rank and step.
void ckpt_fault_point(const char* point, int rank, int step);

}  // namespace ms
