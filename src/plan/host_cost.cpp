// host_cost.cpp: see host_cost.h.
#include "plan/host_cost.h"

namespace ms::plan {

namespace {

const char* collective_op(Collective c) {
  return c == Collective::kAllGather       ? "all_gather"
         : c == Collective::kReduceScatter ? "reduce_scatter"
         : c == Collective::kAllReduce     ? "all_reduce"
                                           : nullptr;
}

// The measured element-wise kernel an op runs as.
std::string kernel_of(const std::string& name, bool backward) {
  const char* dir = backward ? "_bwd" : "_fwd";
  if (name.rfind("ln", 0) == 0) return std::string("layernorm") + dir;
  if (name == "gelu") return std::string("gelu") + dir;
  if (name == "cross-entropy") return "cross_entropy";
  return "stream";
}

// A tensor-parallel collective follows compute: the busy measurement when the host file has it.
std::string busy(const HostTables& h, const std::string& backend, const char* op) {
  const std::string b = std::string(op) + "_busy";
  return h.has_collective(backend, b) ? b : op;
}

double op_time(const PlanOp& op, bool backward, const HostRank& r, const HostTables& h) {
  switch (op.cls) {
    case OpClass::kGemm:
      return h.gemm_seconds(r.precision, r.threads, op.m, op.n, op.k, backward);
    case OpClass::kAttention:
      return h.attention_seconds(r.precision, r.threads, backward ? op.bwd_flops : op.fwd_flops, op.n, backward);
    case OpClass::kElementwise:
      return (backward ? op.bwd_bytes : op.fwd_bytes) /
             (h.kernel_rate_GBps(r.threads, kernel_of(op.name, backward)) * 1e9);
    case OpClass::kCollective:
      return 0;
  }
  return 0;
}

}  // namespace

ChunkTimes host_chunk_times(const std::vector<PlanOp>& ops, const HostRank& r, const HostTables& h, Recompute recompute,
                            bool recomputable) {
  ChunkTimes t;
  for (const PlanOp& op : ops) {
    double f = op_time(op, false, r, h) * r.slowdown, b = op_time(op, true, r, h) * r.slowdown;
    if (op.cls == OpClass::kCollective && r.tp > 1 && op.name != "ag-for-wgrad") {
      const char* cf = collective_op(op.fwd_coll);
      const char* cb = collective_op(op.bwd_coll);
      f = cf ? h.collective_seconds(r.backend, busy(h, r.backend, cf), op.coll_bytes, r.tp) : 0;
      b = cb ? h.collective_seconds(r.backend, busy(h, r.backend, cb), op.coll_bytes, r.tp) : 0;
      t.tp += f + b;
    }
    t.fwd += f, t.bwd += b;
    if (recomputable &&
        (recompute == Recompute::kFull || (recompute == Recompute::kSelective && op.cls == OpClass::kAttention))) {
      t.recompute += f;
      if (op.cls == OpClass::kCollective) t.tp += f;
    }
  }
  t.bwd += t.recompute;
  return t;
}

}  // namespace ms::plan
