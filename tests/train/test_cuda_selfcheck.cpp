// test_cuda_selfcheck: the self-checks of a GPU host (label gpu; skips when no CUDA device opens, as
// on CI): the GEMM check through cuBLASLt in true fp32 against its double-precision reference, and
// the all-reduce check on GPU buffers over NCCL and over the staged self engine (world of one:
// the sums are the contributions). Several ranks: scripts/gpu/check.sh runs `megascale selfcheck
// --device cuda` in two processes sharing the GPU over staged Gloo.
#include <gtest/gtest.h>

#include "base/device.h"
#include "comm/comm_env.h"
#include "comm/world.h"
#include "train/selfcheck.h"

namespace ms {
namespace {

class CudaSelfCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

TEST_F(CudaSelfCheck, CublasLtGemmMatchesTheReference) {
  GemmCheckOptions opt;
  opt.device = Device::kCuda;
  opt.bench_seconds = 0.1;
  const GemmCheckResult r = run_gemm_check(opt);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_LT(r.max_rel_err, 1e-5);  // true fp32 (no TF32, whose error would be ~1e-3)
  EXPECT_GT(r.timed_gemms, 0);
  std::printf("[measured] GPU selfcheck GEMM 512^3 fp32: %.0f GFLOP/s, max relative error %.2g\n", r.gflops,
              r.max_rel_err);
}

TEST_F(CudaSelfCheck, AllReduceOnGpuBuffersOverNcclAndStaging) {
  for (const char* backend : {"nccl", "self"}) {
    SCOPED_TRACE(backend);
    CommEnv env;
    env.backend = backend;
    auto world = init_world(env);
    CollectiveCheckOptions opt;
    opt.device = Device::kCuda;
    const CollectiveCheckResult r = run_collective_check(*world, opt);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_TRUE(r.failed_ranks.empty());
    EXPECT_TRUE(r.suspect_ranks.empty());
    // A wrong contribution is caught on the GPU path too.
    opt.inject_fault = true;
    EXPECT_FALSE(run_collective_check(*world, opt).ok);
  }
}

}  // namespace
}  // namespace ms
