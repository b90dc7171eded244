// gpu_calibrate: the compute half of `megascale plan --calibrate-host --device cuda`: measures the
// trainer's own CUDA kernels (kernels/backend.h cuda_kernels(), on the GPU this process sees) and
// turns their rates into the planner's device efficiencies for a GPU cluster file:
//  - gemm_eta_inf: a bf16 GEMM of M = N = K = gemm_dim (cuBLASLt, fp32 output), over the dense bf16
//    peak of the cluster's description times op_cost.h's tile and wave quantization of that shape
//    (so that the planner, which applies the quantization again, predicts the measured time);
//  - flash_eta: the attention core forward and backward (bf16 tiles, causal) in the FLOPs op_graph.h
//    counts for the fused core: 4 N keys h forward with keys = (s + 1) / 2, 2.5 times that backward;
//  - mem_eta: LayerNorm forward's bytes (fp32 in, fp32 out: 8 per element) over the description's
//    memory bandwidth.
// Each rate is the median of timed repetitions (each of enough calls to last ~20 ms, after a
// warm-up), the stream synchronised around each. An efficiency above 1 (a card clocked over its
// specification's peak) is written as 1. The communication constants (NVLink, the NIC) are not
// measured: one GPU has neither; they keep the planner's defaults, and the file says so.
#pragma once
#include <string>

#include "plan/cluster_desc.h"  // ClusterDesc, EfficiencyTable

namespace ms::plan {

struct GpuCalibrateOptions {
  int gemm_dim = 8192;
  int att_batch = 4, att_seq = 2048, att_heads = 16, att_head_dim = 128;
  int ln_rows = 16384, ln_cols = 4096;
  int repeats = 5;
};

struct GpuRates {
  std::string device;  // the CUDA device's name
  int gemm_dim = 0;
  double gemm_tflops = 0;       // bf16 GEMM, 2 M N K FLOPs
  double attention_tflops = 0;  // forward + backward, op_graph.h's fused-core FLOPs
  double memory_GBps = 0;       // LayerNorm forward, 8 bytes per element
};

// Runs the kernels on the current CUDA device; a named error when none opens. Seconds.
GpuRates measure_gpu_rates(const GpuCalibrateOptions& o);
// The efficiencies the rates give against a GPU description (pure arithmetic).
EfficiencyTable gpu_efficiencies(const ClusterDesc& spec, const GpuRates& r);
// A GPU cluster file of `c` (every field parse_cluster_toml reads, [efficiency] included); `header`
// goes first as comment lines.
std::string gpu_cluster_toml(const ClusterDesc& c, const std::string& header);

}  // namespace ms::plan
