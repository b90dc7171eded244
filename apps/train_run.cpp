// train_run.cpp: see train_run.h. The run's phases live in the library (train/training_run.h);
// this only wires them.
#include "train_run.h"

#include "app_paths.h"            // tokenizer_dir_or_default
#include "train/run_finish.h"     // finish_run
#include "train/run_loop.h"       // run_steps
#include "train/run_model.h"      // build_model
#include "train/training_run.h"   // TrainingRun, install_stop_handlers, start_world, open_data

namespace ms {

float run_training(const Config& cfg) {
  install_stop_handlers();  // before any thread exists
  TrainingRun run;
  start_world(run, cfg);
  open_data(run);
  build_model(run);
  const LoopEnd end = run_steps(run);
  if (end.stopped) return end.last;
  // The tables are looked up only when a sample is decoded (a run without one needs none).
  const bool sampling = run.cfg.train.sample_tokens > 0;
  return finish_run(run, end, sampling ? tokenizer_dir_or_default(run.cfg.data.tokenizer_dir) : std::string());
}

}  // namespace ms
