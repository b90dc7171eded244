// run_observer: the always-on observability of one training rank (docs/observability.md), wired
// once by the training run: who the rank is (obs/rank_identity.h), its clock aligned to rank 0's
// (comm/clock_sync.h, at start-up and every obs.realign_every steps), its record file
// (obs/run_recorder.h: spans, collectives, steps, events), the injected faults of MEGASCALE_FAULT
// (obs/fault_injection.h) and the cross-rank segment summary with straggler naming
// (train/segment_report.h). Collective where noted: every rank calls them at the same steps.
#pragma once
#include <memory>
#include <string>

#include "comm/rank_grid.h"        // RankGrid
#include "config/config.h"         // Config
#include "obs/run_recorder.h"      // RunRecorder
#include "train/run_log.h"         // RunLog, StepRecord
#include "train/segment_report.h"  // SegmentReport

namespace ms {

class RunObserver {
 public:
  // Collective (clock alignment): after the rank grid exists (grid = nullptr: one process).
  // Turns the compute track on (obs.records) and opens the record file.
  RunObserver(const Config& cfg, RankGrid* grid);
  ~RunObserver();

  // Before a step's first communication: the step's number for every record, injected faults.
  void begin_step(int step);
  // After the step: its record line and segment times; every obs.summary_every steps (collective)
  // rank 0 logs the cross-rank summary and names stragglers.
  void end_step(const StepRecord& r, RunLog& log);
  // At the step boundary, after every rank's end_step (collective): re-aligns the clocks when due.
  void after_step(int step);

 private:
  Config cfg_;
  RankGrid* grid_;
  int rank_ = 0;
  int64_t step_t0_ = 0;  // aligned ns
  std::unique_ptr<SegmentReport> report_;
  std::unique_ptr<RunRecorder> recorder_;
};

}  // namespace ms
