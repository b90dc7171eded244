// plan_tool: `megascale plan`, the planner's command (src/plan/): a model (`--model`: a training
// config or one holding only [model]; train.seq_len unless --seq-len), a cluster (`--cluster`: a
// built-in name or a TOML file) and a layout with its features, in the interface of planner.md §2;
// prints the predicted step time, tokens/s, MFU (convention megatron-72), the time split and the
// memory per device, or one JSON object with --json. Guarantees: bad input (a file, a cluster key, a
// layout the model or the batch cannot split) is one named error and exit code 1. What it does not
// do yet, said in its output: its constants are not calibrated ("calibrated": false). Layout flags
// left out (--tp, --pp, --virtual-stages, --schedule, --micro-batch) are searched (plan/layout_search.h;
// --top K prints the K best).
#pragma once
#include <string>

namespace CLI {
class App;
}

namespace ms {

struct PlanArgs {
  std::string model, cluster = "a100-80g";
  int gpus = 0, batch = 0, seq_len = 0, tp = 0, pp = 0, virtual_stages = 0, micro_batch = 0, zero = 2, tp_chunks = 4;
  std::string schedule, dtype = "bf16", sequence_parallel = "on", pp_scatter_gather = "on", recompute = "none",
                        overlap = "tp-bwd,pp,dp", kernels = "megascale", data_pipeline = "async", optimizer = "adam";
  int top = 1;
  bool json = false;
  std::string explain;           // Chrome trace of the predicted step, "" for none
  bool recompute_given = false;  // set from the parse: else the search tries every recomputation
};

void add_plan_command(CLI::App& app, PlanArgs& a);
// Its exit code, or -1 when `plan` was not given.
int run_plan_command(const CLI::App& app, PlanArgs a);

}  // namespace ms
