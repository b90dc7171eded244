// test_kernel_timing: the kernel time accounting (base/kernel_timing.h): off charges nothing, nested
// scopes charge exclusive time (the outer one pauses), every kernel has its own name.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "base/kernel_timing.h"

using namespace ms;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(KernelTiming, OffChargesNothing) {
  set_kernel_timing(false);
  reset_kernel_seconds();
  {
    KernelTimeScope s(KernelId::kGeluForward);
    sleep_ms(5);
  }
  EXPECT_EQ(kernel_seconds(KernelId::kGeluForward), 0.0);
}

TEST(KernelTiming, NestedScopesChargeExclusiveTime) {
  set_kernel_timing(true);
  reset_kernel_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  {
    KernelTimeScope outer(KernelId::kGemmBf16);
    sleep_ms(20);
    {
      KernelTimeScope inner(KernelId::kBf16Convert);
      sleep_ms(30);
    }
    sleep_ms(20);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  set_kernel_timing(false);
  const double outer = kernel_seconds(KernelId::kGemmBf16), inner = kernel_seconds(KernelId::kBf16Convert);
  EXPECT_GE(inner, 0.030);
  EXPECT_GE(outer, 0.040);
  EXPECT_LE(outer + inner, wall + 1e-6) << "no time is counted twice";
  EXPECT_LT(outer, wall - 0.030 + 1e-6) << "the outer scope paused while the inner one ran";
  reset_kernel_seconds();
  EXPECT_EQ(kernel_seconds(KernelId::kGemmBf16), 0.0);
}

TEST(KernelTiming, NamesAreDistinctAndTheAttentionIdsExist) {
  std::set<std::string> names;
  for (int i = 0; i < kNumKernels; i++) names.insert(kernel_name(static_cast<KernelId>(i)));
  EXPECT_EQ(static_cast<int>(names.size()), kNumKernels);
  EXPECT_STREQ(kernel_name(KernelId::kAttentionForward), "attention_fwd");
  EXPECT_STREQ(kernel_name(KernelId::kAttentionBackward), "attention_bwd");
}

}  // namespace
