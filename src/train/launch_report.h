// launch_report: a training rank's word to `megascale launch` (docs/observability.md "Dashboard").
// When the launcher set MEGASCALE_LAUNCH_DIR, rank 0 and the first rank on every other host
// (LOCAL_RANK 0: each host's executor has its own launch folder) write <that folder>/run.json
// atomically:
//   {"out_dir": ..., "records_dir": ..., "world": N, "config": "<the resolved TOML>"}
// (absolute paths), from which the launcher's dashboard and each host's executor find the run's
// record files (the executor also moves its ranks' files of an earlier attempt aside with it).
// Other ranks, and runs not started by the launcher, write nothing. A failure to write is an
// ms::Error naming the file.
#pragma once
#include "config/config.h"  // Config

namespace ms {

void write_launch_report(const Config& cfg, int rank, int world);

}  // namespace ms
