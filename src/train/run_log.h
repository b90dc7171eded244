// run_log: what a run shows and keeps. Per step: step, loss, learning rate, grad norm, tokens/s,
// step time and MFU (model FLOP/s over the hardware peak, kernels/hw_peak.h) with, beside it, the
// ratio to the measured GEMM peak (kernels/gemm_peak.h) — as a progress bar with ETA on a terminal,
// as plain lines otherwise — and the same record as one JSON object per line in <out_dir>/log.jsonl
// (flushed every line, so a crash loses nothing already logged). Validation losses and messages go to
// both.
#pragma once
#include <cmath>  // NAN
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json_fwd.hpp>  // nlohmann::json

#include "base/clock.h"            // Stopwatch
#include "base/dtype.h"            // DType
#include "config/train_config.h"  // ProgressMode

namespace ms {

struct StepRecord {
  int step = 0, total_steps = 0;
  float loss = 0, lr = 0, grad_norm = 0;
  double step_seconds = 0, tokens_per_s = 0;
  // MFU as MegaScale counts it: model FLOP/s of the job / the hardware peak of all its ranks (cores x
  // FLOP/cycle x measured clock, in the run's precision); NaN where unknown.
  double mfu = NAN;
  // The same model FLOP/s / the measured GEMM peak of all ranks (how close to the GEMM ceiling).
  double mfu_gemm = NAN;
  DType precision = DType::kF32;  // names the GEMM peak in the step line
  double comm_exposed_ms = -1;  // data parallel, and the pipeline's tied-embedding sum: time the step waited on
                                // that communication (-1: none)
  double tp_exposed_ms = -1;    // tensor parallel: time the step waited on the TP group (-1: none)
  double pp_wait_ms = -1;       // pipeline: time rank 0's stage waited on sends / receives (-1: none)
  double pp_idle = -1;          // pipeline: rank 0's idle fraction of the step, 1 - compute / step (-1: none)
};

class RunLog {
 public:
  // mode: kAuto (bar when stdout is a terminal), kBar or kLines; silent: write nothing at all (the
  // ranks other than 0 of a parallel run).
  RunLog(const std::string& out_dir, ProgressMode mode, bool silent = false);
  ~RunLog();
  void step(const StepRecord& r);
  void eval(int step, float val_loss);
  // A line to the terminal (clearing the bar first) and, as {"event": ..., "message": ...}, to the log.
  void message(const std::string& event, const std::string& text);

 private:
  void clear_bar();
  // One JSON object per line, flushed; invalid UTF-8 (a byte-level BPE sample can end mid-character)
  // is replaced, never an error.
  void write_line(const nlohmann::json& j);
  std::ofstream jsonl_;
  bool bar_ = false, bar_shown_ = false, silent_ = false;
  Stopwatch since_start_;
};

}  // namespace ms
