// gpu_calibrate.cpp: see gpu_calibrate.h.
#include "plan/gpu_calibrate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include <fmt/format.h>

#include "base/check.h"
#include "base/device.h"     // cuda_available, device_malloc, stream_sync
#include "kernels/backend.h"  // cuda_kernels
#include "plan/op_cost.h"     // gemm_efficiency
#include "plan/op_graph.h"    // attended_keys

namespace ms::plan {

namespace {

// Device memory of `bytes`, zeroed (the kernels' speed does not depend on the values), freed at scope end.
struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) : p(device_malloc(bytes)) { device_memset(p, 0, bytes); }
  ~DeviceBuffer() { device_free(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Median seconds of one call of f over `repeats` timed repetitions, each of enough calls to last ~20 ms.
template <class F>
double median_seconds(KernelBackend& k, int repeats, F&& f) {
  using clock = std::chrono::steady_clock;
  auto timed = [&](int calls) {
    stream_sync(k.stream());
    const auto t0 = clock::now();
    for (int c = 0; c < calls; c++) f();
    stream_sync(k.stream());
    return std::chrono::duration<double>(clock::now() - t0).count() / calls;
  };
  const int calls = std::clamp(static_cast<int>(0.02 / std::max(timed(1), 1e-7)), 1, 1000);  // the first: warm-up
  std::vector<double> t;
  for (int r = 0; r < std::max(1, repeats); r++) t.push_back(timed(calls));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

GpuRates measure_gpu_rates(const GpuCalibrateOptions& o) {
  MS_CHECK(cuda_available(), "plan --calibrate-host --device cuda: no CUDA device opens: {}",
           cuda_unavailable_reason());
  MS_CHECK(o.gemm_dim > 0 && o.att_batch > 0 && o.att_seq > 0 && o.att_heads > 0 && o.att_head_dim > 0 &&
               o.ln_rows > 0 && o.ln_cols > 0,
           "plan --calibrate-host --device cuda: sizes must be > 0");
  KernelBackend& k = cuda_kernels();
  GpuRates r;
  r.device = cuda_device_info().name, r.gemm_dim = o.gemm_dim;
  {
    const size_t n = o.gemm_dim;
    DeviceBuffer a(n * n * sizeof(bf16_t)), b(n * n * sizeof(bf16_t)), c(n * n * sizeof(float));
    const double s = median_seconds(k, o.repeats, [&] {
      k.gemm_bf16(false, true, o.gemm_dim, o.gemm_dim, o.gemm_dim, a.as<bf16_t>(), b.as<bf16_t>(), c.as<float>(),
                  false);
    });
    r.gemm_tflops = 2.0 * n * n * n / s / 1e12;
  }
  {
    const int B = o.att_batch, T = o.att_seq, NH = o.att_heads, C = NH * o.att_head_dim;
    const size_t rows = static_cast<size_t>(B) * T;
    DeviceBuffer qkv(rows * 3 * C * sizeof(float)), out(rows * C * sizeof(float)), lse(rows * NH * sizeof(float)),
        dout(rows * C * sizeof(float)), dqkv(rows * 3 * C * sizeof(float));
    const double fwd = median_seconds(k, o.repeats, [&] {
      k.attention_forward(true, out.as<float>(), lse.as<float>(), qkv.as<float>(), B, T, C, NH, NH, 0);
    });
    const double bwd = median_seconds(k, o.repeats, [&] {
      k.attention_backward(true, dqkv.as<float>(), dout.as<float>(), qkv.as<float>(), out.as<float>(),
                           lse.as<float>(), B, T, C, NH, NH, 0);
    });
    const double fwd_flops = 4.0 * static_cast<double>(rows) * attended_keys(T, 0) * C;
    r.attention_tflops = 3.5 * fwd_flops / (fwd + bwd) / 1e12;
  }
  {
    const size_t n = static_cast<size_t>(o.ln_rows) * o.ln_cols;
    DeviceBuffer in(n * sizeof(float)), out(n * sizeof(float)), w(o.ln_cols * sizeof(float)),
        bias(o.ln_cols * sizeof(float)), mean(o.ln_rows * sizeof(float)), rstd(o.ln_rows * sizeof(float));
    const double s = median_seconds(k, o.repeats, [&] {
      k.layernorm_forward(out.as<float>(), mean.as<float>(), rstd.as<float>(), in.as<float>(), w.as<float>(),
                          bias.as<float>(), o.ln_rows, o.ln_cols, 1e-5f);
    });
    r.memory_GBps = 8.0 * n / s / 1e9;
  }
  return r;
}

EfficiencyTable gpu_efficiencies(const ClusterDesc& spec, const GpuRates& r) {
  MS_CHECK(spec.device.kind == "gpu", "{}: calibrating a GPU against a [device] of kind '{}'", spec.source,
           spec.device.kind);
  MS_CHECK(r.gemm_dim > 0 && r.gemm_tflops > 0 && r.attention_tflops > 0 && r.memory_GBps > 0,
           "plan: GPU rates must be > 0 (GEMM {} TFLOP/s at {}, attention {} TFLOP/s, memory {} GB/s)", r.gemm_tflops,
           r.gemm_dim, r.attention_tflops, r.memory_GBps);
  const double peak = spec.peak_flops(DType::kBF16) / 1e12;
  DeviceEfficiency whole;  // the tile and wave quantization of the measured shape alone
  whole.gemm_eta_inf = 1.0;
  const double d = r.gemm_dim, quantization = gemm_efficiency(d, d, d, spec, whole);
  auto eta = [](double x) { return std::min(1.0, x); };
  return {{"gemm_eta_inf", eta(r.gemm_tflops / (peak * quantization))},
          {"flash_eta", eta(r.attention_tflops / peak)},
          {"mem_eta", eta(r.memory_GBps / spec.device.memory_GBps)}};
}

std::string gpu_cluster_toml(const ClusterDesc& c, const std::string& header) {
  std::string t;
  for (size_t at = 0; at < header.size();) {
    const size_t nl = header.find('\n', at);
    t += "# " + header.substr(at, nl == std::string::npos ? std::string::npos : nl - at) + "\n";
    at = nl == std::string::npos ? header.size() : nl + 1;
  }
  std::vector<std::string> peaks;
  for (const auto& [dtype, v] : c.device.peak_tflops) peaks.push_back(fmt::format("{} = {:.6g}", dtype, v));
  t += fmt::format(
      "[device]\nkind = \"gpu\"\nname = \"{}\"\npeak_tflops = {{ {} }}  # dense\nmemory_gib = {:.6g}\n"
      "memory_GBps = {:.6g}\nsms = {}\n\n"
      "[node]\ndevices_per_node = {}\nintra_GBps = {:.6g}\nintra_latency_us = {:.6g}\n\n"
      "[network]\nnics_per_node = {}\nnic_Gbps = {:.6g}\ninter_latency_us = {:.6g}\nhosts_per_switch = {}\n"
      "topology = \"{}\"\noversubscription = {:.6g}\n",
      c.device.name, fmt::join(peaks, ", "), c.device.memory_gib, c.device.memory_GBps, c.device.sms,
      c.node.devices_per_node, c.node.intra_GBps, c.node.intra_latency_us, c.network.nics_per_node, c.network.nic_Gbps,
      c.network.inter_latency_us, c.network.hosts_per_switch, c.network.topology, c.network.oversubscription);
  if (!c.efficiency.empty()) {
    t += "\n[efficiency]\n";
    for (const auto& [key, v] : c.efficiency) t += fmt::format("{} = {:.4g}\n", key, v);
  }
  if (c.uncertainty.mfu_points > 0 || !c.uncertainty.basis.empty())
    t += fmt::format("\n[uncertainty]\nmfu_points = {:.4g}\nstep_relative = {:.4g}\nbasis = \"{}\"\n",
                     c.uncertainty.mfu_points, c.uncertainty.step_relative, c.uncertainty.basis);
  return t;
}

}  // namespace ms::plan
