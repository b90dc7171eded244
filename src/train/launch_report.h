// launch_report: a training rank's word to `megascale launch` (docs/observability.md "Dashboard").
// When the launcher set MEGASCALE_LAUNCH_DIR, rank 0 writes <that folder>/run.json atomically:
//   {"out_dir": ..., "records_dir": ..., "world": N, "config": "<the resolved TOML>"}
// (absolute paths), from which the launcher's dashboard finds the run's record files. Other ranks,
// and runs not started by the launcher, write nothing. A failure to write is an ms::Error naming
// the file.
#pragma once
#include "config/config.h"  // Config

namespace ms {

void write_launch_report(const Config& cfg, int rank, int world);

}  // namespace ms
