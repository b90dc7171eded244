// host_desc: what `megascale plan --calibrate-host` measured on a CPU host (planner.md §6), the
// tables a CPU "cluster" file carries beside its [device] / [node] / [network] sections, and the
// lookups the step model prices a CPU rank's work with. A device is a rank computing with
// `threads` cores; every table is keyed by the thread counts measured (1 .. cores):
//  - GEMMs, per dtype: the forward (out = X W^T) and the backward (dX = dY W and dW = dY^T X, bf16:
//    with dY's conversion) of a linear layer, GFLOP/s on a grid of M, N, K (the same values for
//    each), looked up by trilinear interpolation of log(rate) in log(M), log(N), log(K), clamped
//    to the grid's edge;
//  - attention forward and backward (the trainer's kernels, head dimension 64, causal), GFLOP/s of
//    the planner's executed FLOPs (op_graph.h) by sequence length, interpolated in log(s);
//  - element-wise kernels (LayerNorm, bias-GeLU, fused softmax cross-entropy) and a triad, GB/s
//    in the planner's byte accounting (op_graph.h: passes x rows x width x 4 B);
//  - the optimizer pass (AdamW, LAMB) with the gradient norm, nanoseconds per parameter;
//  - collectives per backend (gloo, mpi) on this host's ranks: `megascale bench comm`'s median
//    times by message size, each after a barrier and ("<op>_busy") right after a compute burst, interpolated in log-log (clamped below the smallest size, linear in
//    the size beyond the largest), scaled by nccl-tests' bus factor for another group size.
// Guarantees: a loaded table passed validate() (every rate > 0, grids ascending, sizes consistent),
// errors name the file, the key and the reason; a lookup outside the grid is clamped, never
// extrapolated.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "base/dtype.h"  // DType

namespace ms::plan {

struct HostThreadTables {  // one thread count
  std::map<std::string, std::vector<double>>
      gemm;  // "fp32_fwd", "fp32_bwd", "bf16_fwd", "bf16_bwd": dims^3 GFLOP/s, index (im D + in) D + ik
  std::map<std::string, std::vector<double>> attention;  // "fp32_fwd", ...: per attention_seq, GFLOP/s
  std::map<std::string, double>
      kernel_GBps;  // "layernorm_fwd", "layernorm_bwd", "gelu_fwd", "gelu_bwd", "cross_entropy", "stream"
  double adamw_ns_per_param = 0, lamb_ns_per_param = 0;  // the optimizer pass with the gradient norm
};

struct CommTable {            // one collective as `megascale bench comm` measured it
  int ranks = 0;              // the ranks it ran on
  std::vector<double> bytes;  // the whole buffer (nccl-tests' size), ascending
  std::vector<double> us;     // median time of one collective
};

struct HostTables {
  std::vector<int> threads;       // measured thread counts, ascending
  std::vector<double> gemm_dims;  // grid of M, N and K, ascending
  std::vector<double> attention_seq;
  // Peak RSS of a training process whose model is negligible (libraries, threads, loader): one
  // process alone, and one rank of `megascale launch` over Gloo (its communication buffers added).
  double process_floor_mib = 0, rank_floor_mib = 0;
  std::map<int, HostThreadTables> by_threads;
  std::map<std::string, std::map<std::string, CommTable>>
      comm;  // backend -> "all_reduce", "reduce_scatter", "all_gather"
  bool empty() const { return threads.empty(); }

  // The measured thread count used for `threads` (the largest measured <= it, at least the smallest).
  const HostThreadTables& at(int threads) const;
  // Seconds of a linear layer's forward or backward GEMMs of forward shape M x N x K.
  double gemm_seconds(DType precision, int threads, double m, double n, double k, bool backward) const;
  // Seconds of the attention core: `flops` executed (op_graph.h), sequence length s.
  double attention_seconds(DType precision, int threads, double flops, double seq, bool backward) const;
  // GB/s of an element-wise kernel ("layernorm_fwd", ..., "stream").
  double kernel_rate_GBps(int threads, const std::string& kernel) const;
  // The optimizer pass over `params` local parameters.
  double optimizer_seconds(double params, bool lamb, int threads) const;
  // A collective of `bytes` (the whole buffer, as nccl-tests counts it) over n ranks; "send" is a
  // point-to-point transfer (priced as an all-gather of twice the bytes over 2 ranks: each rank
  // sends its half). "<op>_busy": the same measured right after compute (the calibration's busy rows).
  double collective_seconds(const std::string& backend, const std::string& op, double bytes, int n) const;
  bool has_collective(const std::string& backend, const std::string& op) const;

  // Throws naming `where`, the key and the reason.
  void validate(const std::string& where) const;
};

// [host] and [comm] of a cluster table (empty tables when absent).
HostTables parse_host_tables(const toml::table& t, const std::string& where);
// The same as TOML text: "[host]\n...\n[comm.gloo]\n..." (round-trips through parse_host_tables).
std::string host_tables_toml(const HostTables& h);

}  // namespace ms::plan
