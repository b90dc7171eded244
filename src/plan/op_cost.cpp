// op_cost.cpp: see op_cost.h.
#include "plan/op_cost.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace ms::plan {

double gemm_efficiency(double m, double n, double k, const ClusterDesc& c, const DeviceEfficiency& e) {
  MS_CHECK(m > 0 && n > 0 && k > 0, "plan: GEMM {} x {} x {}", m, n, k);
  MS_CHECK(e.gemm_eta_inf > 0 && e.gemm_eta_inf <= 1 && e.tile_m > 0 && e.tile_n > 0 && e.gemm_k_half >= 0,
           "plan: GEMM efficiency eta_inf {}, tile {} x {}, k_half {} out of range", e.gemm_eta_inf, e.tile_m, e.tile_n,
           e.gemm_k_half);
  double eta = e.gemm_eta_inf * k / (k + e.gemm_k_half);
  if (c.device.sms > 0) {
    const double tiles = std::ceil(m / e.tile_m) * std::ceil(n / e.tile_n), sms = c.device.sms;
    const double waves = std::ceil(tiles / sms);
    eta *= tiles / (waves * sms);
  }
  return eta;
}

double op_seconds(const PlanOp& op, bool backward, DType precision, const ClusterDesc& c, const DeviceEfficiency& e) {
  if (op.cls == OpClass::kCollective) return 0;
  MS_CHECK(e.attention_eta > 0 && e.attention_eta <= 1 && e.flash_eta > 0 && e.flash_eta <= 1 && e.mem_eta > 0 &&
               e.mem_eta <= 1 && e.launch_s >= 0,
           "plan: attention eta {}, memory eta {}, launch {} s out of range", e.attention_eta, e.mem_eta, e.launch_s);
  const double flops = backward ? op.bwd_flops : op.fwd_flops, bytes = backward ? op.bwd_bytes : op.fwd_bytes;
  const double peak = c.peak_flops(precision);
  double compute = 0;
  if (op.cls == OpClass::kGemm)
    compute = flops / (peak * gemm_efficiency(op.m, op.n, op.k, c, e));
  else if (op.cls == OpClass::kAttention)
    compute = flops / (peak * (op.name == "flash-attention" ? e.flash_eta : e.attention_eta));
  const double memory = bytes / (c.device.memory_GBps * 1e9 * e.mem_eta);
  if (op.cls == OpClass::kAttention && op.name != "flash-attention")  // unfused: batched GEMMs, then the
    return compute + memory + (backward ? 6 : 4) * e.launch_s;         // scores' passes, one kernel each
  const double launches = op.cls == OpClass::kGemm && backward ? 2 : 1;  // input and weight gradients
  return std::max(compute, memory) + launches * e.launch_s;
}

}  // namespace ms::plan
