// cluster_desc.cpp: see cluster_desc.h.
#include "plan/cluster_desc.h"

#include <filesystem>
#include <set>

#include <toml++/toml.h>

#include "base/check.h"

namespace ms::plan {

namespace {

// Sections and keys a description may hold (anything else is a named error).
const std::map<std::string, std::set<std::string>>& known_keys() {
  static const std::map<std::string, std::set<std::string>> k = {
      {"device", {"kind", "name", "peak_tflops", "memory_gib", "memory_GBps", "sms", "cores", "comm_engine"}},
      {"node", {"devices_per_node", "intra_GBps", "intra_latency_us"}},
      {"network", {"nics_per_node", "nic_Gbps", "inter_latency_us", "hosts_per_switch", "topology", "oversubscription"}},
      {"efficiency",
       {"gemm_eta_inf", "gemm_k_half", "attention_eta", "flash_eta", "mem_eta", "launch_us", "intra_eta", "nic_eta",
        "intra_half_MB", "nic_half_MB", "optimizer_bytes_per_param", "host_sync_s", "host_async_s", "overlap_gamma",
        "straggler_cv", "spine_eta"}},
      {"uncertainty", {"mfu_points", "step_relative", "basis"}}};
  return k;
}

class Reader {
 public:
  Reader(const toml::table& t, std::string where) : t_(t), where_(std::move(where)) {}
  void check_keys() const {
    for (auto&& [sec, node] : t_) {
      const std::string s(sec.str());
      if (s == "host" || s == "comm") continue;  // host_desc.h checks them
      const auto it = known_keys().find(s);
      MS_CHECK(it != known_keys().end(),
               "{}: unknown section [{}] (expected [device], [node], [network], [efficiency], [uncertainty], [host], "
               "[comm])", where_,
               s);
      MS_CHECK(node.is_table(), "{}: [{}] must be a table", where_, s);
      for (auto&& [key, v] : *node.as_table())
        MS_CHECK(it->second.count(std::string(key.str())), "{}: [{}] unknown key '{}'", where_, s, key.str());
    }
  }
  const toml::node* find(const char* sec, const char* key, bool required) const {
    const toml::node* n = t_.at_path(std::string(sec) + "." + key).node();
    MS_CHECK(n || !required, "{}: [{}] {}: missing", where_, sec, key);
    return n;
  }
  void number(const char* sec, const char* key, double& out, bool required = true) const {
    if (const toml::node* n = find(sec, key, required)) {
      MS_CHECK(n->is_number(), "{}: [{}] {}: expected a number", where_, sec, key);
      out = *n->value<double>();
    }
  }
  void integer(const char* sec, const char* key, int& out, bool required = true) const {
    if (const toml::node* n = find(sec, key, required)) {
      MS_CHECK(n->is_integer(), "{}: [{}] {}: expected an integer", where_, sec, key);
      out = static_cast<int>(*n->value<int64_t>());
    }
  }
  void text(const char* sec, const char* key, std::string& out, bool required = true) const {
    if (const toml::node* n = find(sec, key, required)) {
      MS_CHECK(n->is_string(), "{}: [{}] {}: expected a string", where_, sec, key);
      out = *n->value<std::string>();
    }
  }
  void per_dtype(const char* sec, const char* key, std::map<std::string, double>& out) const {
    const toml::node* n = find(sec, key, true);
    MS_CHECK(n->is_table(), "{}: [{}] {}: expected a table such as {{ bf16 = 312.0, fp32 = 19.5 }}", where_, sec, key);
    for (auto&& [k, v] : *n->as_table()) {
      const std::string d(k.str());
      MS_CHECK(d == "bf16" || d == "fp16" || d == "tf32" || d == "fp32",
               "{}: [{}] {}: unknown dtype '{}' (bf16, fp16, tf32, fp32)", where_, sec, key, d);
      MS_CHECK(v.is_number(), "{}: [{}] {}.{}: expected a number", where_, sec, key, d);
      out[d] = *v.value<double>();
    }
  }

 private:
  const toml::table& t_;
  std::string where_;
};

ClusterDesc from_table(const toml::table& t, const std::string& where) {
  const Reader r(t, where);
  r.check_keys();
  ClusterDesc c;
  c.source = where;
  r.text("device", "kind", c.device.kind);
  r.text("device", "name", c.device.name);
  r.per_dtype("device", "peak_tflops", c.device.peak_tflops);
  r.number("device", "memory_gib", c.device.memory_gib);
  r.number("device", "memory_GBps", c.device.memory_GBps);
  r.integer("device", "sms", c.device.sms, /*required=*/false);
  r.integer("device", "cores", c.device.cores, /*required=*/false);
  r.text("device", "comm_engine", c.device.comm_engine, /*required=*/false);
  r.integer("node", "devices_per_node", c.node.devices_per_node);
  r.number("node", "intra_GBps", c.node.intra_GBps);
  r.number("node", "intra_latency_us", c.node.intra_latency_us);
  r.integer("network", "nics_per_node", c.network.nics_per_node);
  r.number("network", "nic_Gbps", c.network.nic_Gbps);
  r.number("network", "inter_latency_us", c.network.inter_latency_us);
  r.integer("network", "hosts_per_switch", c.network.hosts_per_switch);
  r.text("network", "topology", c.network.topology, /*required=*/false);
  r.number("network", "oversubscription", c.network.oversubscription, /*required=*/false);
  for (const std::string& key : known_keys().at("efficiency")) {
    double v = 0;
    if (r.find("efficiency", key.c_str(), false)) r.number("efficiency", key.c_str(), v), c.efficiency[key] = v;
  }
  r.number("uncertainty", "mfu_points", c.uncertainty.mfu_points, /*required=*/false);
  r.number("uncertainty", "step_relative", c.uncertainty.step_relative, /*required=*/false);
  r.text("uncertainty", "basis", c.uncertainty.basis, /*required=*/false);
  c.host = parse_host_tables(t, where);
  c.validate();
  return c;
}

// Public specifications; the latencies are assumptions (planner.md §2) until calibrated.
ClusterDesc make_builtin(const std::string& name) {
  ClusterDesc c;
  c.source = "built-in " + name;
  c.node.devices_per_node = 8;
  c.node.intra_latency_us = 2.0;
  c.network.nics_per_node = 8;
  c.network.inter_latency_us = 5.0;
  c.network.hosts_per_switch = 64;
  if (name == "a100-80g") {  // A100-SXM4-80GB, NVLink 3 via NVSwitch, 8 x 200 Gb/s HDR
    c.device.name = "A100-SXM4-80GB";
    c.device.peak_tflops = {{"bf16", 312.0}, {"fp16", 312.0}, {"tf32", 156.0}, {"fp32", 19.5}};
    c.device.memory_gib = 80.0, c.device.memory_GBps = 2039.0, c.device.sms = 108;
    c.node.intra_GBps = 300.0;
    c.network.nic_Gbps = 200.0;
    // Calibrated: configs/clusters/a100-80g.toml says on what, and why each value.
    c.efficiency = {
        {"gemm_eta_inf", 0.8},  {"attention_eta", 0.75}, {"flash_eta", 0.55},  {"mem_eta", 0.9},
        {"intra_eta", 0.5},     {"nic_eta", 0.6},       {"host_sync_s", 0.05}, {"optimizer_bytes_per_param", 56},
        {"overlap_gamma", 0.4}};
    c.uncertainty = {1.70, 0,
                     "held-out RMS of bench/plan_validate.py: 1.37 leaving one source out, 1.70 one scale out (26 "
                     "rows: Korthikanti T5, MegaScale T2 and T3)"};
  } else {  // h100-80g / h200-141g: Hopper SXM5, NVLink 4, 8 x 400 Gb/s NDR; H200 = H100's compute, HBM3e
    const bool h200 = name == "h200-141g";
    c.device.name = h200 ? "H200-SXM-141GB" : "H100-SXM5-80GB";
    c.device.peak_tflops = {{"bf16", 989.0}, {"fp16", 989.0}, {"tf32", 494.5}, {"fp32", 66.9}};
    c.device.memory_gib = h200 ? 141.0 : 80.0, c.device.memory_GBps = h200 ? 4800.0 : 3350.0, c.device.sms = 132;
    c.node.intra_GBps = 450.0;
    c.network.nic_Gbps = 400.0;
  }
  return c;
}

}  // namespace

double ClusterDesc::peak_flops(DType t) const {
  const char* key = t == DType::kBF16 ? "bf16" : t == DType::kF16 ? "fp16" : t == DType::kF32 ? "fp32" : nullptr;
  MS_CHECK(key, "{}: no peak for element type {}", source, dtype_name(t));
  const auto it = device.peak_tflops.find(key);
  MS_CHECK(it != device.peak_tflops.end(), "{}: [device] peak_tflops has no {}", source, key);
  return it->second * 1e12;
}

double ClusterDesc::nic_Bps_per_device() const {
  return network.nic_Gbps * 1e9 / 8.0 * network.nics_per_node / node.devices_per_node;
}

void ClusterDesc::validate() const {
  MS_CHECK(device.kind == "gpu" || device.kind == "cpu", "{}: [device] kind: '{}' must be gpu or cpu", source,
           device.kind);
  MS_CHECK(!device.name.empty(), "{}: [device] name: empty", source);
  for (const char* d : {"bf16", "fp32"})
    MS_CHECK(device.peak_tflops.count(d), "{}: [device] peak_tflops: missing {}", source, d);
  for (const auto& [d, v] : device.peak_tflops)
    MS_CHECK(v > 0, "{}: [device] peak_tflops.{}: {} must be > 0", source, d, v);
  auto positive = [&](const char* sec, const char* key, double v) {
    MS_CHECK(v > 0, "{}: [{}] {}: {} must be > 0", source, sec, key, v);
  };
  positive("device", "memory_gib", device.memory_gib);
  positive("device", "memory_GBps", device.memory_GBps);
  MS_CHECK(device.sms >= 0, "{}: [device] sms: {} must be >= 0", source, device.sms);
  MS_CHECK(device.comm_engine == "nic" || device.comm_engine == "cores",
           "{}: [device] comm_engine: '{}' must be nic or cores", source, device.comm_engine);
  if (device.kind == "cpu") {
    MS_CHECK(device.cores > 0, "{}: [device] cores: missing or not > 0 (a CPU host needs it)", source);
    MS_CHECK(!host.empty(), "{}: [host]: missing (a CPU host's measured tables: megascale plan --calibrate-host)",
             source);
  }
  host.validate(source);
  positive("node", "devices_per_node", node.devices_per_node);
  positive("node", "intra_GBps", node.intra_GBps);
  MS_CHECK(node.intra_latency_us >= 0, "{}: [node] intra_latency_us: {} must be >= 0", source, node.intra_latency_us);
  positive("network", "nics_per_node", network.nics_per_node);
  positive("network", "nic_Gbps", network.nic_Gbps);
  MS_CHECK(network.inter_latency_us >= 0, "{}: [network] inter_latency_us: {} must be >= 0", source,
           network.inter_latency_us);
  positive("network", "hosts_per_switch", network.hosts_per_switch);
  MS_CHECK(network.oversubscription >= 1, "{}: [network] oversubscription: {} must be >= 1 (1 = 1:1)", source,
           network.oversubscription);
  for (const auto& [key, v] : efficiency) {
    const bool eta = key.find("eta") != std::string::npos;
    MS_CHECK(eta ? (v > 0 && v <= 1) : v >= 0, "{}: [efficiency] {}: {} must be {}", source, key, v,
             eta ? "in (0, 1]" : ">= 0");
  }
  MS_CHECK(uncertainty.mfu_points >= 0 && uncertainty.step_relative >= 0 && uncertainty.step_relative < 1,
           "{}: [uncertainty] mfu_points {} must be >= 0 and step_relative {} in [0, 1)", source,
           uncertainty.mfu_points, uncertainty.step_relative);
  MS_CHECK(network.topology == "fat-tree", "{}: [network] topology: '{}' (only fat-tree is modelled)", source,
           network.topology);
}

bool is_builtin_cluster(const std::string& name) {
  return name == "a100-80g" || name == "h100-80g" || name == "h200-141g";
}

ClusterDesc builtin_cluster(const std::string& name) {
  MS_CHECK(is_builtin_cluster(name), "unknown built-in cluster '{}' (a100-80g, h100-80g, h200-141g, or a TOML file)", name);
  return make_builtin(name);
}

ClusterDesc parse_cluster_toml(const std::string& text, const std::string& where) {
  try {
    return from_table(toml::parse(text, where), where);
  } catch (const toml::parse_error& e) {
    MS_FAIL("{}:{}:{}: TOML parse error: {}", where, e.source().begin.line, e.source().begin.column, e.description());
  }
}

ClusterDesc load_cluster(const std::string& name_or_path) {
  if (is_builtin_cluster(name_or_path)) return builtin_cluster(name_or_path);
  MS_CHECK(std::filesystem::is_regular_file(name_or_path),
           "cluster '{}': no such file, and not a built-in name "
           "(a100-80g, h100-80g, h200-141g)",
           name_or_path);
  try {
    return from_table(toml::parse_file(name_or_path), name_or_path);
  } catch (const toml::parse_error& e) {
    MS_FAIL("{}:{}:{}: TOML parse error: {}", name_or_path, e.source().begin.line, e.source().begin.column,
            e.description());
  }
}

}  // namespace ms::plan
