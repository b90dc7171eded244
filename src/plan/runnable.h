// runnable: what the trainer would do with a planned layout. The planner proposes only layouts the
// trainer runs: a layout becomes the trainer's own Config (the [model] section given, the layout's
// [parallel] and [train] fields), which Config::validate() judges exactly as `megascale train`
// would before any rank starts (heads, key/value heads, MLP width and padded vocabulary divisible
// by tp, layers by pp x virtual stages, interleaving's micro-batches, the sequence under sequence
// parallelism, recomputation's groups, ...). The same Config gives the command-line overrides that
// run the layout.
#pragma once
#include <string>

#include "config/config.h"     // Config, RecomputeKind
#include "plan/step_model.h"   // PlanLayout

namespace ms::plan {

// plan::Recompute as the trainer's model.recompute.
RecomputeKind recompute_kind(Recompute r);

// The trainer's config for model m trained in layout l (world size tp x pp x dp), not validated.
Config trainer_config(const ModelConfig& m, const PlanLayout& l);

// Why the trainer would refuse l for m (its validation's message), or "" when it runs it.
std::string trainer_refusal(const ModelConfig& m, const PlanLayout& l);

// `--parallel.tp=2 --parallel.pp=4 ... --model.recompute=full`: the overrides of `megascale launch
// --nproc N -- train CONFIG` that run l (everything but the model section, which is the config's).
std::string trainer_overrides(const PlanLayout& l);

}  // namespace ms::plan
