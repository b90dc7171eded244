// obs_config: the [obs] section of the config tree: the always-on per-rank records (segment timers,
// collectives, steps) written to <train.out_dir>/records/, the cross-rank segment summary in the log,
// straggler detection and the hang watchdog. docs/observability.md describes the record files.
// Fields are declared once, in the X-macro list below (X(type, name, default, doc)).
#pragma once
#include <string>

#include "config/config_enum.h"  // MS_DECLARE_FIELD

namespace ms {

#define MS_OBS_FIELDS(X)                                                                            \
  X(bool, records, true, "write every rank's segment timings, collectives and steps to <train.out_dir>/records/rank-<R>.jsonl (read by megascale trace / heatmap / diagnose and the launcher's dashboard)") \
  X(int, flush_ms, 1000, "a background thread appends the new records to the rank's file this often (milliseconds)") \
  X(int, summary_every, 10, "every N steps the log shows min / median / max of each segment across ranks, with the rank of the max, and names stragglers (0 = never)") \
  X(float, straggler_margin, 0.10f, "a rank is slow in a segment when its time exceeds the median of its peers (the ranks of its pipeline stage) by more than this fraction (default obs/straggler.h kStragglerMargin, derived from measured noise: docs/observability.md, Stragglers)") \
  X(int, straggler_window, 30, "steps over which a rank's slowness is judged: slow in at least 60% of them = chronic lag, fewer = one-off stalls (default obs/straggler.h kStragglerWindow)") \
  X(int, realign_every, 500, "re-measure the ranks' clock offsets (against rank 0, through the communicator) every N steps (0 = only at start-up)") \
  X(bool, watchdog, true, "a watchdog thread per rank: an operation past its deadline (parallel.timeout_s) dumps the rank's recent collectives and current segment to <train.out_dir>/hang/ and ends the rank with exit code 86") \
  X(float, watchdog_grace_s, 2.0f, "the watchdog acts this long after an operation's deadline, leaving the engine's own timeout the first word")

struct ObsConfig {
  MS_OBS_FIELDS(MS_DECLARE_FIELD)
  // Checks the fields of this section alone; Config::validate() runs it, then the cross-section checks.
  void validate() const;
};

}  // namespace ms
