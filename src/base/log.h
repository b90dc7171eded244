// log: the loggers for diagnostics — notices, warnings and errors for a person, on stderr, one line
// each (spdlog, thread-safe, flushed per line, kept out of spdlog's global registry so they cannot
// clash with a program's own). Metrics are not diagnostics: the run log (train/run_log.h) keeps them
// in log.jsonl; command output goes to stdout.
#pragma once
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace ms {

// The process's logger: "megascale: <level>: <text>" (created on first use; level from
// $MEGASCALE_LOG_LEVEL, default info).
spdlog::logger& logger();

// A component's own logger whose lines read "<name>: <text>" (the launcher's "megascale launch: ...").
std::shared_ptr<spdlog::logger> make_named_logger(const std::string& name);

}  // namespace ms
