// test_cuda_comm: communication on GPU buffers (label gpu; every test skips when no CUDA device
// opens, as on CI). The CPU path is the oracle: comm_check's closed forms (tests/tools/comm_check).
//  - NCCL at world size 1: every op, fp32 and bf16, sum and max, in place and async, on device
//    buffers; RankGrid's groups (ncclCommSplit) and a new_group through the store; a deadline hit
//    by a stream held by a spinning kernel ends in a CommError naming op, group and sequence, and
//    the group is unusable afterwards (abort, never a hang).
//  - Gloo through pinned host staging, two and four processes sharing the GPU: every op on device
//    buffers against the closed forms, and the groups of a 2 x 2 grid.
//  - Ordering: an op started right after a slow kernel that writes its input sees the kernel's
//    result (the op waits on an event, not on the host's return), on NCCL and on staged Gloo.
// NCCL with several ranks on one GPU is not tested: NCCL before 2.30 refuses it.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "base/device.h"
#include "comm/comm_env.h"
#include "comm/communicator.h"
#include "comm/world.h"
#include "common/processes.h"
#include "common/test_util.h"
#include "kernels/cuda_kernels.h"  // cuda::spin, cuda::fill

namespace ms {
namespace {

using ms::testing::Clock;
using ms::testing::Proc;
using ms::testing::spawn;
using ms::testing::wait_all;

// comm_check beside this binary (the GPU machine's .gpu/bin), else in the build's tools folder.
std::string worker() { return ms::testing::beside_self("comm_check", std::string(MEGASCALE_TOOLS_DIR) + "/comm_check"); }

class CudaCommTest : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_cuda_comm"; }
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
    TempDirTest::SetUp();
  }
  // n ranks of comm_check on `backend`, rendezvous through a file store.
  void run_ranks(const std::string& backend, int n, const std::vector<std::string>& args, double limit_s = 120) {
    std::vector<Proc> ps;
    for (int r = 0; r < n; r++) {
      std::map<std::string, std::string> env = {{"MEGASCALE_BACKEND", backend}, {"RANK", std::to_string(r)},
                                                {"WORLD_SIZE", std::to_string(n)},
                                                {"MEGASCALE_STORE", "file:" + path("store")},
                                                {"MEGASCALE_RUN_ID", "run"}};
      std::vector<std::string> argv = {worker()};
      argv.insert(argv.end(), args.begin(), args.end());
      ps.push_back(spawn(argv, env, path("out." + std::to_string(r))));
    }
    std::vector<Proc*> ptrs;
    for (auto& p : ps) ptrs.push_back(&p);
    wait_all(ptrs, Clock::now(), limit_s);
    for (int r = 0; r < n; r++) {
      EXPECT_EQ(ps[r].code, 0) << backend << " rank " << r << ":\n" << ps[r].output();
      EXPECT_NE(ps[r].output().find("PASS"), std::string::npos) << ps[r].output();
    }
  }
  static std::unique_ptr<Communicator> nccl_world(int timeout_ms) {
    CommEnv env;
    env.backend = "nccl";
    env.timeout = std::chrono::milliseconds(timeout_ms);
    return init_world(env);
  }
};

TEST_F(CudaCommTest, NcclWorldOfOneEveryOpAndGroups) {
  run_ranks("nccl", 1, {"--mode", "ops", "--device", "cuda", "--grid", "tp-dp-pp:1,1,1", "--timeout-ms", "30000"});
}

TEST_F(CudaCommTest, NcclNewGroupAndHostBuffers) {
  auto world = nccl_world(30000);
  EXPECT_STREQ(world->backend(), "nccl");
  auto sub = world->new_group({0}, "solo");
  std::vector<float> h = {1, 2, 3};  // host buffers: through the group's device scratch
  sub->all_reduce(h.data(), 3, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(h, (std::vector<float>{1, 2, 3}));
  std::vector<float> g(3, 0);
  world->all_gather(h.data(), g.data(), 3, DType::kF32);
  EXPECT_EQ(g, h);
  world->barrier();
}

TEST_F(CudaCommTest, NcclDeadlineOnABlockedStreamIsANamedError) {
  auto world = nccl_world(500);
  const Stream busy = stream_create();
  DeviceBuffer<float> buf(1024);
  cuda::fill(buf.data(), 1024, 1.0f, busy);
  cuda::spin(2500, busy);  // the op's input is "produced" 2.5 s from now: past the 0.5 s deadline
  const auto t0 = Clock::now();
  CommWork w = world->start_all_reduce(buf.data(), 1024, DType::kF32, ReduceOp::kSum, {Device::kCuda, busy});
  try {
    w.wait();
    FAIL() << "an all_reduce behind a 2.5 s kernel met its 0.5 s deadline";
  } catch (const CommError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("all_reduce"), std::string::npos) << what;
    EXPECT_NE(what.find("'world'"), std::string::npos) << what;
    EXPECT_NE(what.find("seq 0"), std::string::npos) << what;
    EXPECT_NE(what.find("deadline"), std::string::npos) << what;
  }
  EXPECT_LT(ms::testing::seconds_since(t0), 30.0);
  // The group is unusable afterwards: the next op fails at once.
  EXPECT_THROW(world->all_reduce(buf.data(), 1024, DType::kF32, ReduceOp::kSum, {Device::kCuda, busy}), CommError);
  stream_sync(busy);
  stream_destroy(busy);
}

// An all-reduce started on the host right after a slow kernel that writes its input: the result is
// the kernel's, because the op waits on an event recorded after it.
void check_ordering(Communicator& c) {
  const Stream compute = stream_create();
  const size_t n = 1 << 20;
  DeviceBuffer<float> buf(n);
  cuda::fill(buf.data(), n, 1.0f, compute);
  stream_sync(compute);
  cuda::spin(300, compute);
  cuda::fill(buf.data(), n, 5.0f, compute);  // the input, final only after the spin
  CommWork w = c.start_all_reduce(buf.data(), n, DType::kF32, ReduceOp::kSum, {Device::kCuda, compute});
  w.wait_on(compute);
  cuda::scale(buf.data(), n, 2.0f, compute);  // a consumer on the stream, after the op
  std::vector<float> host(n);
  buf.download(host.data(), n, compute);
  stream_sync(compute);
  size_t bad = 0;
  for (float v : host) bad += v != 10.0f * static_cast<float>(c.size());
  EXPECT_EQ(bad, 0u) << c.backend() << ": " << bad << " of " << n << " elements are not 2 x sum of 5";
  stream_destroy(compute);
}

TEST_F(CudaCommTest, NcclOpWaitsOnTheProducersEvent) {
  auto world = nccl_world(30000);
  check_ordering(*world);
}

TEST_F(CudaCommTest, StagedSelfOpWaitsOnTheProducersEvent) {
  CommEnv env;  // self: the staging path with a device copy stream of its own
  auto world = init_world(env);
  check_ordering(*world);
}

TEST_F(CudaCommTest, StagedGlooTwoProcessesShareTheGpu) {
  run_ranks("gloo", 2, {"--mode", "ops", "--device", "cuda", "--grid", "tp-dp-pp:2,1,1", "--timeout-ms", "60000"});
}

TEST_F(CudaCommTest, StagedGlooFourProcessesShareTheGpu) {
  run_ranks("gloo", 4, {"--mode", "ops", "--device", "cuda", "--grid", "tp-dp-pp:2,2,1", "--timeout-ms", "60000"});
}

}  // namespace
}  // namespace ms
