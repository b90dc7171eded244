// test_device: base/device.h where no device may exist (CI: no GPU, or a driver older than the
// runtime; TSan builds: no CUDA at all). cuda_available() answers false without throwing and says
// why; asking for the cuda device is a named error; cpu is always usable; host copies work.
// Where a device does open, the buffer round trip and the allocation counter are checked too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/check.h"
#include "base/device.h"

namespace ms {
namespace {

TEST(Device, NamesAndCpuAlwaysUsable) {
  EXPECT_STREQ(device_name(Device::kCpu), "cpu");
  EXPECT_STREQ(device_name(Device::kCuda), "cuda");
  EXPECT_NO_THROW(require_device(Device::kCpu));
  std::vector<int> a{1, 2, 3}, b(3);
  copy_bytes(b.data(), Device::kCpu, a.data(), Device::kCpu, sizeof(int) * 3);
  EXPECT_EQ(a, b);
}

TEST(Device, UnavailableCudaIsANamedError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device opens here";
  const std::string reason = cuda_unavailable_reason();
  EXPECT_FALSE(reason.empty());
  if (!cuda_built()) {
    EXPECT_NE(reason.find("MEGASCALE_WITH_CUDA"), std::string::npos) << reason;
  }
  try {
    require_device(Device::kCuda);
    FAIL() << "require_device(cuda) did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("device cuda"), std::string::npos) << what;
    EXPECT_NE(what.find(cuda_built() ? reason : std::string("MEGASCALE_WITH_CUDA")), std::string::npos) << what;
  }
  EXPECT_THROW(device_malloc(16), Error);
  EXPECT_EQ(device_malloc(0), nullptr);
  EXPECT_EQ(device_allocations(), 0u);
}

TEST(Device, BufferRoundTripAndCounter) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device opens: " << cuda_unavailable_reason();
  const size_t before = device_allocations();
  std::vector<float> h(1000), back(1000);
  for (size_t i = 0; i < h.size(); ++i) h[i] = 0.5f * static_cast<float>(i);
  Stream s = stream_create();
  {
    DeviceBuffer<float> d(h.size());
    DeviceBuffer<float> e(h.size());
    d.upload(h.data(), h.size(), s);
    copy_bytes(e.data(), Device::kCuda, d.data(), Device::kCuda, sizeof(float) * h.size(), s);
    e.download(back.data(), back.size(), s);
    stream_sync(s);
    d.resize(h.size());  // same size: no reallocation
  }
  stream_destroy(s);
  EXPECT_EQ(h, back);
  EXPECT_EQ(device_allocations(), before + 2);
  const DeviceInfo info = cuda_device_info();
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.clock_khz, 0);
}

}  // namespace
}  // namespace ms
