// host_cost: a pipeline chunk's operations (op_graph.h) priced on a CPU host from its measured
// tables (host_desc.h), as the CPU trainer runs them (planner.md §6):
//  - GEMMs, attention, element-wise kernels and the optimizer at the rate measured for the rank's
//    thread count, with every other rank of the host busy at the same time (the tables are
//    measured that way), slowed by ranks x threads / cores when the host's cores are oversubscribed;
//  - activations stay fp32 (bf16 is a GEMM-operand format only), so element-wise bytes and
//    tensor-parallel messages count 4 B per element;
//  - tensor-parallel collectives are CPU work on the same cores (comm_engine "cores"): each one
//    costs its full measured time on the compute timeline (the "_busy" one, measured right after
//    compute, when the host file has it), chunked or not, and the backward
//    mirrors the forward (a gather's gradient is a reduce-scatter and vice versa; the gathered
//    input is kept for the weight gradient, so no second all-gather);
//  - recomputation repeats the layers' forward operations (full) or the attention core (selective).
#pragma once
#include <string>
#include <vector>

#include "base/dtype.h"       // DType
#include "plan/host_desc.h"   // HostTables
#include "plan/model_math.h"  // Recompute
#include "plan/op_graph.h"    // PlanOp

namespace ms::plan {

struct HostRank {
  DType precision = DType::kF32;
  int threads = 1;      // the rank's compute threads
  double slowdown = 1;  // ranks x threads / cores when above 1 (time-sharing)
  int tp = 1;           // the TP group the collectives run over
  std::string backend = "gloo";
};

struct ChunkTimes {
  double fwd = 0, bwd = 0;       // per micro-batch, everything included (what the pipeline runs)
  double recompute = 0, tp = 0;  // of which: recomputation, TP communication
};

// `recomputable`: the transformer layers' ops (never the embedding or the head).
ChunkTimes host_chunk_times(const std::vector<PlanOp>& ops, const HostRank& r, const HostTables& h, Recompute recompute,
                            bool recomputable);

}  // namespace ms::plan
