// cluster_desc: what `megascale plan` knows of a cluster — the device (peak FLOP/s per dtype, memory
// and its bandwidth), the node (devices, intra-node links) and the network (NICs, latency, hosts per
// switch) — loaded from a TOML file (configs/clusters/*.toml) or by a built-in name (a100-80g,
// h100-80g: public specifications), or a CPU host's file written by `megascale plan
// --calibrate-host` (kind "cpu", with the measured [host] and [comm] tables of host_desc.h). Guarantees: every loaded description passed validate(); a
// missing field, an unknown section or key, a wrong type or a value out of range is an error naming
// the file, the field and the reason. Units are in the field names (GBps: gigabytes per second per
// direction; Gbps: gigabits per second per direction; us: microseconds).
#pragma once
#include <map>
#include <string>

#include "base/dtype.h"      // DType
#include "plan/host_desc.h"  // HostTables

namespace ms::plan {

struct DeviceDesc {
  std::string kind = "gpu";  // "gpu" or "cpu" (a host written by --calibrate-host)
  std::string name;          // e.g. "A100-SXM4-80GB"
  std::map<std::string, double>
      peak_tflops;         // dense peak per dtype: "bf16", "fp16", "tf32", "fp32" (bf16, fp32 required)
  double memory_gib = 0;   // device memory
  double memory_GBps = 0;  // its bandwidth
  int sms = 0;             // streaming multiprocessors (0: not given; GPU GEMM wave quantization)
  int cores = 0;           // a CPU host's cores (ranks share them; required for kind "cpu")
  // "nic": collectives run on their own engine and can hide behind compute (GPUs); "cores": they
  // are CPU work on the ranks' own cores, charged to the compute timeline even when "overlapped"
  // (planner.md §6; required for kind "cpu").
  std::string comm_engine = "nic";
};

struct NodeDesc {
  int devices_per_node = 0;
  double intra_GBps = 0;  // per device per direction (NVLink through NVSwitch)
  double intra_latency_us = 0;
};

struct NetworkDesc {
  int nics_per_node = 0;
  double nic_Gbps = 0;  // per NIC per direction
  double inter_latency_us = 0;
  int hosts_per_switch = 0;           // hosts under one top-of-rack set (MegaScale §3.6: 64)
  std::string topology = "fat-tree";  // "fat-tree"
  // The fat tree's upper tiers: a host's bandwidth to the spine over its bandwidth to its leaf
  // (1 = 1:1, MegaScale §3.6; 2 = 2:1 oversubscribed); traffic that stays under one switch set
  // does not see it.
  double oversubscription = 1.0;
};

// [efficiency] (optional): calibrated constants of the planner by name (step_model.h
// plan_constants: gemm_eta_inf, gemm_k_half, attention_eta, flash_eta, mem_eta, launch_us, intra_eta, nic_eta,
// intra_half_MB, nic_half_MB, optimizer_bytes_per_param, host_sync_s, host_async_s, overlap_gamma,
// straggler_cv, spine_eta); absent ones
// keep the planner's defaults. Efficiencies (*_eta*) lie in (0, 1], the others are >= 0.
using EfficiencyTable = std::map<std::string, double>;

// [uncertainty] (optional): how far the planner's predictions for this cluster were off on data its
// constants were not fitted to (bench/plan_validate.py's held-out folds for a GPU cluster; the
// measured runs of bench/bench_plan.sh for a CPU host); `megascale plan` prints its range from it.
struct Uncertainty {
  double mfu_points = 0;     // held-out RMS error of the MFU, in points (0: unknown)
  double step_relative = 0;  // relative error of the step time (0: unknown)
  std::string basis;         // what it was measured on
};

struct ClusterDesc {
  DeviceDesc device;
  NodeDesc node;
  NetworkDesc network;
  EfficiencyTable efficiency;
  Uncertainty uncertainty;
  HostTables host;     // [host] and [comm]: a CPU host's measured tables (empty for GPUs)
  std::string source;  // the file or "built-in <name>" it came from

  // Peak FLOP/s of one device for a training dtype (fp32, bf16, fp16); a named error when the
  // description has none for it.
  double peak_flops(DType t) const;
  // Per-device share of the node's NICs, in bytes per second per direction.
  double nic_Bps_per_device() const;
  // Throws naming `source`, the field and the reason.
  void validate() const;
};

// The built-in names: "a100-80g", "h100-80g", "h200-141g" (the Hopper ones not calibrated yet).
bool is_builtin_cluster(const std::string& name);
ClusterDesc builtin_cluster(const std::string& name);
// A built-in name, or a TOML file.
ClusterDesc load_cluster(const std::string& name_or_path);
// Parses TOML text (`where` names it in errors).
ClusterDesc parse_cluster_toml(const std::string& text, const std::string& where);

}  // namespace ms::plan
