// plan_tool: `megascale plan`, the planner's command (src/plan/): a model (`--model`: a training
// config or one holding only [model]; train.seq_len unless --seq-len), a cluster (`--cluster`: a
// built-in name or a TOML file) and a layout with its features, in the interface of planner.md §2;
// prints the predicted step time, tokens/s, MFU (convention megatron-72), the time split and the
// memory per device, or one JSON object with --json. Guarantees: bad input (a file, a cluster key, a
// layout the model or the batch cannot split) is one named error and exit code 1. What it does not
// do yet, said in its output: a cluster without fitted constants ("calibrated": false). Layout flags
// left out (--tp, --pp, --virtual-stages, --schedule, --micro-batch) are searched (plan/layout_search.h;
// --top K prints the K best).
// `megascale plan CONFIG.toml [--section.key=value ...] --cluster HOST.toml --gpus R` predicts a
// training run from the very config and overrides it trains with: [train] (batch_size = the
// micro-batch, grad_accum, global_batch, precision, threads), [parallel] (tp, pp, dp, schedule,
// virtual_stages, sequence_parallel, tp_chunks, pp_decoupled, overlap, backend, bucket_mb) and
// [optim] give the layout and features; --gpus counts ranks. `--calibrate-host` writes the CPU host
// file (plan_calibrate.h).
#pragma once
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ms {

struct PlanArgs {
  std::string config;                  // a whole training config (positional), with overrides
  std::vector<std::string> overrides;  // "--section.key=value" or "--section.key value" after it
  std::string model, cluster = "a100-80g";
  int gpus = 0, batch = 0, seq_len = 0, tp = 0, pp = 0, virtual_stages = 0, micro_batch = 0, zero = 2, tp_chunks = 4;
  std::string schedule, dtype = "bf16", sequence_parallel = "on", pp_scatter_gather = "on", recompute = "none",
                        overlap = "tp-bwd,pp,dp", kernels = "megascale", data_pipeline = "async", optimizer = "adam",
                        grad_reduce = "fp32";
  int top = 1;
  bool json = false;
  std::string explain;           // Chrome trace of the predicted step, "" for none
  bool recompute_given = false;  // set from the parse: else the search tries every recomputation
  bool calibrate_host = false;   // --calibrate-host --ranks R --out HOST.toml [--quick]
  int ranks = 2;
  std::string out;
  bool quick = false;
  std::string device = "cpu";  // --calibrate-host --device cuda: this machine's GPU instead
};

void add_plan_command(CLI::App& app, PlanArgs& a);
// Its exit code, or -1 when `plan` was not given.
int run_plan_command(const CLI::App& app, PlanArgs a);

}  // namespace ms
