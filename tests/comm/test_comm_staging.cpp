// test_comm_staging: comm/staging.h with host memory standing in for GPU memory (CI has no GPU):
// the ranges an op reads and writes, in-place forms sharing one host block, only the write range
// copied back, the pool reused once warm; NCCL asked for without a device is a named error.
// tests/comm/test_comm.cpp runs every op through staging on the self world and, against closed
// forms, on Gloo and MPI worlds (comm_check --stage).
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "comm/comm_env.h"
#include "comm/communicator.h"
#include "comm/staging.h"
#include "comm/world.h"

namespace ms {
namespace {

TEST(HostStagingTest, DisjointRangesCopyReadInAndWriteOut) {
  HostStaging s(Device::kCpu);
  std::vector<float> in(10), out(4, -1.0f);
  std::iota(in.begin(), in.end(), 0.0f);
  auto c = s.stage_in({in.data(), in.size() * 4}, {out.data(), out.size() * 4});
  auto* hin = static_cast<float*>(c->host(in.data()));
  auto* hout = static_cast<float*>(c->host(out.data()));
  ASSERT_NE(hin, in.data());
  ASSERT_NE(hout, out.data());
  for (int i = 0; i < 10; i++) EXPECT_EQ(hin[i], i);
  EXPECT_EQ(c->host(in.data() + 3), hin + 3);
  EXPECT_EQ(c->host(nullptr), nullptr);
  for (int i = 0; i < 4; i++) hout[i] = 100.0f + i;
  in[0] = 55.0f;  // the host copy was taken at stage_in
  EXPECT_EQ(hin[0], 0.0f);
  s.stage_out(*c);
  EXPECT_EQ(out, (std::vector<float>{100, 101, 102, 103}));
  EXPECT_EQ(in[0], 55.0f);  // the read range is not written back
  EXPECT_THROW(c->host(in.data() + 20), Error);
}

TEST(HostStagingTest, InPlaceRangesShareOneBlock) {
  HostStaging s(Device::kCpu);
  // reduce_scatter in place: out = in + rank*shard (rank 2 of 4, shard 3).
  std::vector<float> buf(12);
  std::iota(buf.begin(), buf.end(), 0.0f);
  auto c = s.stage_in({buf.data(), 48}, {buf.data() + 6, 12});
  auto* h = static_cast<float*>(c->host(buf.data()));
  EXPECT_EQ(c->host(buf.data() + 6), h + 6);
  h[6] = -1, h[7] = -2, h[8] = -3, h[0] = 99;  // h[0]: outside the write range
  s.stage_out(*c);
  EXPECT_EQ(buf[6], -1);
  EXPECT_EQ(buf[8], -3);
  EXPECT_EQ(buf[0], 0);  // only the write range goes back
  EXPECT_EQ(buf[9], 9);
  // all_gather in place: in = out + rank*shard.
  std::vector<float> out(8, 0.0f);
  out[2] = 7, out[3] = 8;
  auto g = s.stage_in({out.data() + 2, 8}, {out.data(), 32});
  auto* ho = static_cast<float*>(g->host(out.data()));
  EXPECT_EQ(g->host(out.data() + 2), ho + 2);
  EXPECT_EQ(ho[2], 7);
  EXPECT_EQ(ho[3], 8);
}

TEST(HostStagingTest, PoolIsReusedOnceWarm) {
  HostStaging s(Device::kCpu);
  std::vector<char> a(1000), b(4000);
  { auto c = s.stage_in({a.data(), a.size()}, {}); }
  { auto c = s.stage_in({b.data(), b.size()}, {}); }
  const size_t warm = s.allocations();
  for (int i = 0; i < 20; i++) {
    auto c1 = s.stage_in({a.data(), a.size()}, {});
    auto c2 = s.stage_in({b.data(), b.size()}, {});
  }
  EXPECT_EQ(s.allocations(), warm);
  auto empty = s.stage_in({}, {});
  EXPECT_EQ(empty->host(nullptr), nullptr);
}

TEST(NcclBackendTest, AskingForItWithoutADeviceIsNamed) {
  if (cuda_available()) GTEST_SKIP() << "a GPU opens here: test_cuda_comm covers NCCL";
  CommEnv env;
  env.backend = "nccl";
  try {
    init_world(env);
    FAIL() << "init_world(nccl) without a device succeeded";
  } catch (const Error& e) {
    const std::string what = e.what();
    // Built with NCCL: require_device names CUDA; built without: the build option.
    EXPECT_TRUE(what.find("cuda") != std::string::npos || what.find("MEGASCALE_WITH_NCCL") != std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace ms
