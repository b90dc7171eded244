// recovery_report: what each recovery of a driven job cost and which path restored the state,
// from the files the job leaves: the ranks' <out_dir>/restore_rank<R>.json (written by each rank
// after it restored: "memory" with its copy's source — its own on its host, or a peer's replica —
// or storage, with the phases' seconds) and the driver's <log_dir>/events.jsonl.
//  - restore_summary: the restore files of one attempt folded into one object: the path ("memory",
//    "storage" or "mixed"), how many ranks used their own copy / a peer's / storage, the slowest
//    rank's restore seconds and phases, the start-up phases of the rank slowest to start, and why
//    memory was not used when storage was read (the driver logs it as its `recovery` event);
//  - recovery_table: every fault of events.jsonl as a markdown table: detection, stopping,
//    self-checks, restart to the first step done, the path and restore seconds of its `recovery`
//    event, steps repeated (`megascale report LOG_DIR` prints it; the dashboard shows the events).
// Guarantees: missing or malformed files are reported in the result, never thrown past it.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace ms {

// out_dir's restore_rank<R>.json for R < world, those modified at or after `since` (Unix seconds;
// 0: any), folded as above; {"ranks": 0} when none is there.
nlohmann::json restore_summary(const std::string& out_dir, int world, double since = 0);

// The recoveries of events.jsonl (a file or a log folder holding one) as a markdown table; an
// explanation when there is none or the file cannot be read.
std::string recovery_table(const std::string& events_path);

}  // namespace ms
