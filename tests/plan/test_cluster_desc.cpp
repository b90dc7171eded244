// test_cluster_desc: the shipped cluster files (configs/clusters/) hold the public specifications
// the built-in names give; every bad description is a named error: a missing field, an unknown
// section, key or dtype, a wrong type, a value out of range, a file that does not exist.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/test_util.h"
#include "plan/cluster_desc.h"

using namespace ms::plan;

namespace {

std::string shipped(const std::string& name) {
  return std::string(MEGASCALE_SOURCE_DIR) + "/configs/clusters/" + name + ".toml";
}

std::string text_of(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(ClusterDesc, ShippedFilesEqualTheBuiltIns) {
  for (const char* name : {"a100-80g", "h100-80g", "h200-141g"}) {
    const ClusterDesc f = load_cluster(shipped(name)), b = load_cluster(name);
    EXPECT_EQ(f.device.name, b.device.name);
    EXPECT_EQ(f.device.peak_tflops, b.device.peak_tflops);
    EXPECT_EQ(f.device.memory_gib, b.device.memory_gib);
    EXPECT_EQ(f.device.memory_GBps, b.device.memory_GBps);
    EXPECT_EQ(f.device.sms, b.device.sms);
    EXPECT_EQ(f.node.devices_per_node, b.node.devices_per_node);
    EXPECT_EQ(f.node.intra_GBps, b.node.intra_GBps);
    EXPECT_EQ(f.node.intra_latency_us, b.node.intra_latency_us);
    EXPECT_EQ(f.network.nics_per_node, b.network.nics_per_node);
    EXPECT_EQ(f.network.nic_Gbps, b.network.nic_Gbps);
    EXPECT_EQ(f.network.inter_latency_us, b.network.inter_latency_us);
    EXPECT_EQ(f.network.hosts_per_switch, b.network.hosts_per_switch);
    EXPECT_EQ(f.efficiency, b.efficiency);
    EXPECT_EQ(f.uncertainty.mfu_points, b.uncertainty.mfu_points);
    EXPECT_EQ(f.uncertainty.basis, b.uncertainty.basis);
  }
  EXPECT_GT(builtin_cluster("a100-80g").uncertainty.mfu_points, 0.0);  // validated: bench/plan_validate.py
  const ClusterDesc a = builtin_cluster("a100-80g");
  EXPECT_DOUBLE_EQ(a.peak_flops(ms::DType::kBF16), 312e12);
  EXPECT_DOUBLE_EQ(a.peak_flops(ms::DType::kF32), 19.5e12);
  EXPECT_DOUBLE_EQ(a.nic_Bps_per_device(), 25e9);  // one 200 Gb/s NIC per GPU
  EXPECT_DOUBLE_EQ(builtin_cluster("h100-80g").peak_flops(ms::DType::kBF16), 989e12);
}

TEST(ClusterDesc, AnEfficiencyTableIsReadByName) {
  const std::string text = text_of(shipped("h100-80g")) + "\n[efficiency]\ngemm_eta_inf = 0.7\nlaunch_us = 4.0\n";
  const ClusterDesc c = parse_cluster_toml(text, "x.toml");
  EXPECT_EQ(c.efficiency.size(), 2u);
  EXPECT_DOUBLE_EQ(c.efficiency.at("gemm_eta_inf"), 0.7);
  EXPECT_DOUBLE_EQ(c.efficiency.at("launch_us"), 4.0);
  EXPECT_TRUE(builtin_cluster("h100-80g").efficiency.empty());  // not calibrated
  EXPECT_TRUE(builtin_cluster("h200-141g").efficiency.empty());
  EXPECT_DOUBLE_EQ(builtin_cluster("h200-141g").device.memory_gib, 141.0);
  EXPECT_DOUBLE_EQ(builtin_cluster("a100-80g").efficiency.at("flash_eta"), 0.55);  // bench/plan_fit_*.py
}

TEST(ClusterDesc, BadDescriptionsAreNamed) {
  std::string good = text_of(shipped("a100-80g"));
  good = good.substr(0, good.find("[efficiency]"));  // the cases below add their own
  auto bad = [&](const std::string& from, const std::string& to, const std::vector<std::string>& parts) {
    ms::testing::expect_error([&] { parse_cluster_toml(replaced(good, from, to), "x.toml"); }, parts);
  };
  bad("memory_gib = 80.0\n", "", {"x.toml", "[device] memory_gib: missing"});
  bad("sms = 108", "sms = 108\ncolor = \"green\"", {"x.toml", "[device] unknown key 'color'"});
  bad("[node]", "[nodes]", {"x.toml", "unknown section [nodes]"});
  bad("tf32 = 156.0", "fp8 = 624.0", {"unknown dtype 'fp8'"});
  bad("devices_per_node = 8", "devices_per_node = \"eight\"", {"[node] devices_per_node: expected an integer"});
  bad("nic_Gbps = 200.0", "nic_Gbps = -1.0", {"[network] nic_Gbps", "must be > 0"});
  bad("kind = \"gpu\"", "kind = \"tpu\"", {"[device] kind", "gpu or cpu"});
  bad("bf16 = 312.0, ", "", {"peak_tflops: missing bf16"});
  bad("topology = \"fat-tree\"", "topology = \"fat-tree\"\n[efficiency]\ngemm_eta_inf = 1.5",
      {"[efficiency] gemm_eta_inf: 1.5 must be in (0, 1]"});
  bad("topology = \"fat-tree\"", "topology = \"fat-tree\"\n[efficiency]\nfudge = 1.1",
      {"[efficiency] unknown key 'fudge'"});
  bad("topology = \"fat-tree\"", "topology = \"fat-tree\"\noversubscription = 0.5",
      {"[network] oversubscription: 0.5 must be >= 1"});
  bad("topology = \"fat-tree\"", "topology = \"fat-tree\"\n[efficiency]\nspine_eta = 0",
      {"[efficiency] spine_eta: 0 must be in (0, 1]"});
  EXPECT_DOUBLE_EQ(parse_cluster_toml(replaced(good, "topology = \"fat-tree\"",
                                               "topology = \"fat-tree\"\noversubscription = 3"),
                                      "x.toml")
                       .network.oversubscription,
                   3.0);
  ms::testing::expect_error([] { load_cluster("/nonexistent/cluster.toml"); },
                            {"/nonexistent/cluster.toml", "no such file"});
  ms::testing::expect_error([] { builtin_cluster("v100"); }, {"unknown built-in cluster 'v100'"});
  ms::testing::expect_error([] { builtin_cluster("a100-80g").peak_flops(ms::DType::kI32); }, {"no peak"});
}

}  // namespace
