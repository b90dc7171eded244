// run_folder: what the driver reads and moves in a run's folder (<train.out_dir>, when it is
// visible from the driver's machine) and the launch folder's run.json (launch-internal):
//  - archive_hang_dumps: the hang dumps of attempt k move to <out_dir>/attempts/<k>/hang/, so the
//    next attempt's diagnosis reads only its own (the executors do the same for their ranks' files);
//  - dump_segment: the compute segment a rank's hang dump was in ("checkpoint-stage1", ...; "" when
//    it left no dump or the dump names none), which recovery_policy.h blames storage for;
//  - write_run_json: <launch_dir>/run.json naming the run's folder for the dashboard (dashboard.h).
// Errors are not thrown: a missing folder or dump is nothing to move or read; a run.json that cannot
// be written is returned in words.
#pragma once
#include <string>

namespace ms::launch {

void archive_hang_dumps(const std::string& out_dir, int attempt);
std::string dump_segment(const std::string& out_dir, int rank);
// "" on success, else why not.
std::string write_run_json(const std::string& launch_dir, const std::string& out_dir, int world);

}  // namespace ms::launch
