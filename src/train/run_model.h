// run_model: the training run's model phase (training_run.h). build_model makes the trainer over
// its ParallelModel, restores the newest checkpoint that verifies (train.resume; ckpt/restore.h) or
// initializes the weights, opens the machine's training feed at the restored data position, pins
// the threads, creates the checkpointer (its stage-1 copy finishes right before each update), logs
// the layout, and on rank 0 measures the MFU denominators (the hardware peak, kernels/hw_peak.h,
// and the GEMM peak, kernels/gemm_peak.h) and logs the start. Collective over the whole job.
#pragma once
#include "train/training_run.h"  // TrainingRun

namespace ms {

// After start_world and open_data.
void build_model(TrainingRun& run);

}  // namespace ms
