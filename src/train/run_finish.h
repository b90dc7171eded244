// run_finish: the end of a training run that was not stopped early (training_run.h): the
// validation of a run resumed at its last step, the final checkpoint save waited for (an error with
// checkpoint.on_failure = stop), the parameters completed, the loader's and the pipeline's summary
// (each stage's idle fraction against the schedule's closed-form bubble, gathered over the pipeline
// group), the Hugging Face export on rank 0 (the whole model assembled over the first replica's TP
// and PP groups when it is split) and a text sample.
// Collective over the whole job.
#pragma once
#include <string>

#include "train/training_run.h"  // TrainingRun, LoopEnd

namespace ms {

// tokenizer_dir: the GPT-2 tokenizer's folder for the sample. Returns the final validation loss
// (or the last training loss without validation data).
float finish_run(TrainingRun& run, const LoopEnd& end, const std::string& tokenizer_dir);

}  // namespace ms
