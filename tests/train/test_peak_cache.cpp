// test_peak_cache: the measured MFU denominators a restart reuses (train/peak_cache.h): what is
// written reads back field for field on this machine with the same threads and precision, and
// anything else (other threads, other precision, another machine's key, a malformed or missing file)
// reads as nothing, so the restart measures again.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "train/peak_cache.h"

namespace {

using namespace ms;

TEST(PeakCache, RoundTripsOnlyForTheSameMachineThreadsAndPrecision) {
  const std::string dir = ms::testing::make_temp_dir("peak_cache");
  const std::string path = dir + "/peaks.json";
  MeasuredPeaks p;
  p.hw.cores = 2, p.hw.clock_ghz = 3.5, p.hw.fp32_flop_per_cycle = 64, p.hw.bf16_flop_per_cycle = 128;
  p.hw.fp32_unit = "AVX-512 FMA", p.hw.bf16_unit = "AVX512-BF16", p.hw.bf16_measured = true;
  p.hw.fp32_issue_per_cycle = 1.98, p.hw.bf16_issue_per_cycle = 2.02;
  p.gemm_gflops = 321.5;
  write_peak_cache(path, 2, DType::kF32, p);
  const std::optional<MeasuredPeaks> q = read_peak_cache(path, 2, DType::kF32);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->hw.cores, 2);
  EXPECT_EQ(q->hw.clock_ghz, 3.5);
  EXPECT_EQ(q->hw.fp32_flop_per_cycle, 64);
  EXPECT_EQ(q->hw.bf16_flop_per_cycle, 128);
  EXPECT_EQ(q->hw.fp32_unit, "AVX-512 FMA");
  EXPECT_EQ(q->hw.bf16_unit, "AVX512-BF16");
  EXPECT_TRUE(q->hw.bf16_measured);
  EXPECT_EQ(q->hw.fp32_issue_per_cycle, 1.98);
  EXPECT_EQ(q->gemm_gflops, 321.5);
  EXPECT_EQ(q->hw.gflops(DType::kF32), p.hw.gflops(DType::kF32));
  EXPECT_FALSE(read_peak_cache(path, 4, DType::kF32).has_value()) << "other threads";
  EXPECT_FALSE(read_peak_cache(path, 2, DType::kBF16).has_value()) << "other precision";
  nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
  j["machine"] = "another-host|another CPU";
  std::ofstream(path) << j.dump();
  EXPECT_FALSE(read_peak_cache(path, 2, DType::kF32).has_value()) << "another machine";
  std::ofstream(path) << "{torn";
  EXPECT_FALSE(read_peak_cache(path, 2, DType::kF32).has_value()) << "malformed";
  EXPECT_FALSE(read_peak_cache(dir + "/none.json", 2, DType::kF32).has_value()) << "missing";
  write_peak_cache(dir + "/no/such/folder/peaks.json", 2, DType::kF32, p);  // not an error
  std::filesystem::remove_all(dir);
}

}  // namespace
