// test_host_desc: a CPU host file's tables (plan/host_desc.h): a GEMM at a grid point runs at the
// rate measured there; between grid points the rate is the log-linear interpolation (checked at
// the geometric midpoint against the closed form), beyond the grid it is clamped; the collective
// table interpolates in log-log, grows linearly beyond its largest size and scales to another
// group size by nccl-tests' bus factor; a send is an all-gather of twice its bytes over 2 ranks;
// the file round-trips through host_tables_toml; bad tables are errors naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <toml++/toml.h>

#include "base/check.h"
#include "host_fixture.h"
#include "plan/cluster_desc.h"

namespace {

using ms::plan::ClusterDesc;
using ms::plan::parse_cluster_toml;

TEST(HostDesc, GemmRatesInterpolateInLogSpaceAndClamp) {
  ClusterDesc c = parse_cluster_toml(ms::testing::host_toml(100, 50, 10, 1, 100), "host");
  auto& g = c.host.by_threads[2].gemm["fp32_fwd"];
  // Rate 100 GFLOP/s where M = 64, 400 where M = 256 (whatever N and K).
  for (size_t i = 0; i < g.size(); i++) g[i] = i < 4 ? 100 : 400;
  const double f64 = 2.0 * 64 * 64 * 64, f128 = 2.0 * 128 * 64 * 64, f4096 = 2.0 * 4096 * 64 * 64;
  EXPECT_NEAR(c.host.gemm_seconds(ms::DType::kF32, 2, 64, 64, 64, false), f64 / 100e9, 1e-15);
  // M = 128 is halfway in log(M): exp(mean of the logs) = 200.
  EXPECT_NEAR(c.host.gemm_seconds(ms::DType::kF32, 2, 128, 64, 64, false), f128 / 200e9, 1e-15);
  EXPECT_NEAR(c.host.gemm_seconds(ms::DType::kF32, 2, 4096, 64, 64, false), f4096 / 400e9, 1e-12);  // clamped
  // The backward is two GEMMs of the forward's FLOPs; 3 threads use the 2-thread table.
  EXPECT_NEAR(c.host.gemm_seconds(ms::DType::kF32, 3, 64, 64, 64, true), 2 * f64 / 100e9, 1e-15);
}

TEST(HostDesc, CollectivesInterpolateScaleAndExtrapolate) {
  const ClusterDesc c = parse_cluster_toml(ms::testing::host_toml(100, 50, 10, 1, 100), "host");
  const auto& h = c.host;
  EXPECT_NEAR(h.collective_seconds("gloo", "all_gather", 1 << 20, 2), 100e-6, 1e-12);
  EXPECT_NEAR(h.collective_seconds("gloo", "all_gather", 1.5 * (1 << 20), 2), 100e-6 * 1.5, 1e-12);  // log-log line
  EXPECT_NEAR(h.collective_seconds("gloo", "all_gather", 8 << 20, 2), 800e-6, 1e-12);                // linear beyond
  EXPECT_NEAR(h.collective_seconds("gloo", "all_gather", 512 << 10, 2), 100e-6, 1e-12);              // clamped below
  // 4 ranks move (4-1)/4 of the buffer per rank, 1.5x what 2 ranks move: 1 MiB over 4 = 1.5 MiB over 2.
  EXPECT_NEAR(h.collective_seconds("gloo", "all_gather", 1 << 20, 4), 150e-6, 1e-12);
  EXPECT_NEAR(h.collective_seconds("gloo", "send", 1 << 20, 2), 200e-6, 1e-12);
  EXPECT_EQ(h.collective_seconds("gloo", "all_reduce", 1 << 20, 1), 0.0);
  EXPECT_THROW(h.collective_seconds("mpi", "all_reduce", 1 << 20, 2), ms::Error);
}

TEST(HostDesc, RoundTripsThroughItsToml) {
  const ClusterDesc c = parse_cluster_toml(ms::testing::host_toml(123, 45, 6, 0.7, 89), "host");
  const auto again = ms::plan::parse_host_tables(toml::parse(ms::plan::host_tables_toml(c.host)), "again");
  EXPECT_EQ(again.threads, c.host.threads);
  EXPECT_EQ(again.gemm_dims, c.host.gemm_dims);
  EXPECT_EQ(again.by_threads.at(2).gemm.at("bf16_bwd"), c.host.by_threads.at(2).gemm.at("bf16_bwd"));
  EXPECT_EQ(again.by_threads.at(1).kernel_GBps, c.host.by_threads.at(1).kernel_GBps);
  EXPECT_EQ(again.comm.at("gloo").at("all_reduce").us, c.host.comm.at("gloo").at("all_reduce").us);
}

void expect_error(const std::string& text, const std::string& what) {
  try {
    parse_cluster_toml(text, "host.toml");
    ADD_FAILURE() << "no error for " << what;
  } catch (const ms::Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("host.toml"), std::string::npos) << e.what();
  }
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(HostDesc, BadTablesAreNamedErrors) {
  const std::string ok = ms::testing::host_toml(100, 50, 10, 1, 100);
  expect_error(replace(ok, "gemm_dims = [64, 256]", "gemm_dims = [256, 64]"), "gemm_dims");
  expect_error(replace(ok, "gemm_fp32_fwd = [100, 100, 100, 100, 100, 100, 100, 100]", "gemm_fp32_fwd = [100]"),
               "gemm_fp32_fwd");
  expect_error(replace(ok, "stream_GBps", "streams_GBps"), "stream_GBps");
  expect_error(replace(ok, "[host]\nthreads = [1, 2]", "[host]\nthreads = [1, 2]\nwhatever = 1"), "whatever");
  expect_error(replace(ok, "cores = 2\n", ""), "cores");
  expect_error(replace(ok, "[comm.gloo]", "[comm.nccl]"), "comm.nccl");
  expect_error(replace(ok, "us = [100, 200]", "us = [100]"), "all_gather");
  expect_error(replace(ok, "comm_engine = \"cores\"", "comm_engine = \"dma\""), "comm_engine");
}

}  // namespace
