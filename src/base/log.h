// log: the one logger for diagnostics — notices, warnings and errors for a person, on stderr, one
// line each: "megascale: <level>: <text>" (spdlog, thread-safe). Metrics are not diagnostics: the
// run log (train/run_log.h) keeps them in log.jsonl; command output goes to stdout.
#pragma once
#include <spdlog/spdlog.h>

namespace ms {

// The process's logger (created on first use; level from $MEGASCALE_LOG_LEVEL, default info).
spdlog::logger& logger();

}  // namespace ms
