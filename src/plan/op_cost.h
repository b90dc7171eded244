// op_cost: the time of one operation (op_graph.h) on one device, a roofline with efficiency curves
// (planner.md §4.2):
//   t = max(FLOPs / (peak x eta), bytes / (memory bandwidth x eta_mem)) + launch
// with, for a GEMM on a GPU, eta from tile and wave quantization: the output is cut into tiles of
// tile_m x tile_n, tiles = ceil(M / tile_m) ceil(N / tile_n), they run in waves = ceil(tiles / SMs),
// and eta = eta_inf x tiles / (waves x SMs) x K / (K + k_half) (a shallow K cannot fill the
// pipeline); a device without SMs given (a CPU) takes eta_inf x K / (K + k_half). The attention
// core: FlashAttention-2 (op "flash-attention") is one fused kernel, the roofline at flash_eta;
// Megatron's unfused core is a chain of kernels, so its batched GEMMs at attention_eta and its
// passes over the s x s scores (softmax, dropout: op_graph.h) add up, with a launch each. Every
// constant here is a physical efficiency in (0, 1],
// a size, or a time; DeviceEfficiency's defaults are structural (calibration, planner.md §5-6,
// is still to come) and no constant names a model, a scale or a paper row.
#pragma once
#include "plan/cluster_desc.h"  // ClusterDesc
#include "plan/op_graph.h"      // PlanOp

namespace ms::plan {

struct DeviceEfficiency {
  double gemm_eta_inf = 0.8;       // large well-shaped GEMMs' share of the dense peak
  double gemm_k_half = 0;          // K at which a GEMM reaches half of it (0: no K effect)
  int tile_m = 128, tile_n = 256;  // the GEMM library's output tile
  double attention_eta = 0.5;      // the unfused core's batched GEMMs' share of the peak
  double flash_eta = 0.5;          // FlashAttention-2's share of the peak (its executed FLOPs)
  double mem_eta = 0.8;            // element-wise kernels' share of the memory bandwidth
  double launch_s = 5e-6;          // per kernel launch
};

// eta of an M x N x K GEMM on the device (wave quantization when the device has SMs).
double gemm_efficiency(double m, double n, double k, const ClusterDesc& c, const DeviceEfficiency& e);
// Forward or backward seconds of one op at the given precision's peak; collectives cost 0 here
// (comm_cost.h prices them on their links).
double op_seconds(const PlanOp& op, bool backward, DType precision, const ClusterDesc& c, const DeviceEfficiency& e);

}  // namespace ms::plan
