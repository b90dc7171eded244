// train_run: `megascale train`, the whole run of one rank, wired from the library's phases
// (train/training_run.h):
// world and rank grid from the environment, data loaders, the trainer (with ZeRO-2 over the
// data-parallel group), the run log, validation, the trace, the Hugging Face export and a sample.
#pragma once
#include "config/config.h"  // Config

namespace ms {

// The full run described by cfg: prints progress, writes cfg.train.out_dir/{config.resolved.toml,
// log.jsonl, model/}, returns the final validation loss (or the last training loss without
// validation data). Under a launcher (megascale launch, mpirun, srun), every rank calls it: the
// world is set up from the environment (comm/comm_env.h), the config validated, then the layout
// resolved against the world size, all before any work; rank 0 writes the run directory.
float run_training(const Config& cfg);

}  // namespace ms
