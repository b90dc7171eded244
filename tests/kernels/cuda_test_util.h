// cuda_test_util: what the parts of test_cuda_kernels (test_cuda_kernels.cpp and the files of
// test_cuda_kernels/) share: the CudaKernels fixture (skips where no CUDA device opens), one random
// generator per process (a new seed every run, printed once), host <-> device copies, outputs
// poisoned with NaN, `twice` (a second run on the same inputs must give the same bits), and the
// comparisons: relative L2 against the oracle with every element written, or bit equality.
// Header-only (inline): every part of the binary sees the same fixture type and the same generator.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/bf16.h"
#include "base/device.h"

namespace ms::cuda_test {

using Outputs = std::vector<std::vector<float>>;

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device opens: " << cuda_unavailable_reason();
  }
};

inline std::mt19937_64& rng() {
  static std::mt19937_64 g = [] {
    const uint64_t seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("[test_cuda_kernels] seed %llu\n", static_cast<unsigned long long>(seed));
    return std::mt19937_64(seed);
  }();
  return g;
}
inline std::vector<float> randn(size_t n, float scale = 1.f) {
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}
inline std::vector<int> rand_ids(size_t n, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi - 1);
  std::vector<int> v(n);
  for (int& x : v) x = d(rng());
  return v;
}
inline std::vector<bf16_t> to_bf16(const std::vector<float>& v) {
  std::vector<bf16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16_rne(v[i]);
  return o;
}
inline std::vector<float> widen(const std::vector<bf16_t>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_f32(v[i]);
  return o;
}

template <typename T>
DeviceBuffer<T> up(const std::vector<T>& h) {
  DeviceBuffer<T> d(h.size());
  d.upload(h.data(), h.size());
  return d;
}
template <typename T>
std::vector<float> down(const DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  d.download(h.data(), h.size());
  stream_sync({});
  if constexpr (sizeof(T) == 2) return widen(h);
  else return std::vector<float>(h.begin(), h.end());
}
template <typename T>
DeviceBuffer<T> poisoned(size_t n) {  // all bits set: NaN in fp32 and in bf16
  DeviceBuffer<T> d(n);
  device_memset(d.data(), 0xFF, n * sizeof(T));
  return d;
}

// Runs `run` twice; the second run must give the same bits. Returns the first run's outputs.
inline Outputs twice(const std::function<Outputs()>& run) {
  Outputs a = run();
  Outputs b = run();
  EXPECT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    EXPECT_EQ(a[k].size(), b[k].size());
    EXPECT_EQ(0, std::memcmp(a[k].data(), b[k].data(), sizeof(float) * a[k].size()))
        << "output " << k << " differs between two runs on the same inputs";
  }
  return a;
}

// Every element written (finite wherever the CPU's is) and ||got - ref|| / ||ref|| <= tol.
inline void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref, double tol) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0, first_bad = 0;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) continue;
    if (!std::isfinite(got[i])) {
      if (bad++ == 0) first_bad = i;
      continue;
    }
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " elements not written or not finite (first at " << first_bad << ")";
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  std::printf("  %-44s rel L2 %.3g\n", what.c_str(), rel);
  EXPECT_LE(rel, tol) << what;
}
inline void expect_bits(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) diff += std::memcmp(&got[i], &ref[i], sizeof(float)) != 0;
  std::printf("  %-44s %zu of %zu elements differ in bits\n", what.c_str(), diff, ref.size());
  EXPECT_EQ(diff, 0u) << what;
}

// " NxC" (appended piecewise: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string&&).
inline std::string dims(const char* prefix, int a, int b) {
  std::string s(prefix);
  s += std::to_string(a);
  s += 'x';
  s += std::to_string(b);
  return s;
}

}  // namespace ms::cuda_test
