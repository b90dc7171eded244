// run_loop: the training run's steps (training_run.h). From run.first_step to train.steps: one
// trainer step (a communication failure goes to the hang watch: a dump and exit 86 under
// obs.watchdog, else the rank's communication trace and the error), the step's record (loss, lr,
// norm, tokens/s, MFU against run.hw_gflops, exposed communication) to the run log and the
// observer, validation every train.eval_every steps and at the end, then the step boundary: every
// rank agrees in one all-reduce whether to stop (a stop signal on any rank, a failed save with
// checkpoint.on_failure = stop) and saves every checkpoint.every steps, at the end and before
// stopping (the stage-1 copy runs beside the next step; ckpt/checkpointer.h). An error after the
// world exists ends the rank at once, after saying it (hang_watch.h): unwinding would tear down
// groups with ops in flight while the peers wait.
#pragma once
#include "train/training_run.h"  // TrainingRun, LoopEnd

namespace ms {

// After build_model. stopped = true: a signal or train.exit_after ended the run, its state saved.
LoopEnd run_steps(TrainingRun& run);

// The checkpoint writer's finished saves: rank 0 logs whole saves (every rank logs its own
// failures as they happen). Returns true if one failed.
bool report_saves(TrainingRun& run);

}  // namespace ms
