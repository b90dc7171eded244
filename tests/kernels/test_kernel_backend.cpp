// test_kernel_backend: the CPU KernelBackend (kernels/backend.h) against references written here
// from the entries' definitions: the embedding lookup, position add and backward against plain
// loops (exact: the same additions in the same order), the masked loss mean against a double sum,
// and gemm_f32 against a naive triple loop in double (every transpose, with and without
// accumulation; within 1e-5 relative L2). kernels_for(kCuda) on a machine where no GPU opens is a
// named error (the message says why), never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "base/check.h"   // ms::Error
#include "base/device.h"  // cuda_available
#include "base/rng.h"     // Rng
#include "kernels/backend.h"

namespace ms {
namespace {

std::vector<float> random_vec(size_t n, uint64_t seed) {
  Rng r(seed, 1);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(r.normal());
  return v;
}

TEST(KernelBackend, EmbeddingLookupAndPositionsMatchLoops) {
  KernelBackend& k = cpu_kernels();
  EXPECT_EQ(k.device(), Device::kCpu);
  const int N = 37, C = 20, Vl = 9, v0 = 4, v1 = v0 + Vl, T = 8;
  const std::vector<float> wte = random_vec(static_cast<size_t>(Vl) * C, 1), wpe = random_vec(T * C, 2);
  std::vector<int> ids(N);
  for (int i = 0; i < N; i++) ids[i] = (i * 5 + 1) % 17;  // some outside [v0, v1)
  std::vector<float> out(static_cast<size_t>(N) * C, NAN);
  k.embedding_lookup(out.data(), ids.data(), wte.data(), 3, N, C, v0, v1);
  k.embedding_lookup(out.data(), ids.data(), wte.data(), 0, 3, C, v0, v1);  // two row ranges cover all
  const int row0 = 5;
  k.add_position_embedding(out.data(), wpe.data(), N, C, T, row0);
  for (int i = 0; i < N; i++)
    for (int c = 0; c < C; c++) {
      const int id = ids[i];
      const float te = id >= v0 && id < v1 ? wte[static_cast<size_t>(id - v0) * C + c] : 0.0f;
      ASSERT_EQ(out[static_cast<size_t>(i) * C + c], te + wpe[static_cast<size_t>((row0 + i) % T) * C + c])
          << "row " << i << " col " << c;
    }
}

TEST(KernelBackend, EmbeddingBackwardSumsRowsInOrder) {
  KernelBackend& k = cpu_kernels();
  const int N = 41, n = 13, C = 70, Vl = 6, v0 = 2, v1 = v0 + Vl, T = 7, row0 = 3;
  const std::vector<float> d = random_vec(static_cast<size_t>(N) * C, 3), dl = random_vec(static_cast<size_t>(n) * C, 4);
  std::vector<int> ids(N);
  for (int i = 0; i < N; i++) ids[i] = (i * 3) % 11;
  std::vector<float> dwte = random_vec(static_cast<size_t>(Vl) * C, 5), dwpe = random_vec(T * C, 6);
  std::vector<float> want_te = dwte, want_pe = dwpe;
  for (int i = 0; i < n; i++)
    for (int c = 0; c < C; c++) want_pe[static_cast<size_t>((row0 + i) % T) * C + c] += dl[static_cast<size_t>(i) * C + c];
  for (int i = 0; i < N; i++)
    if (ids[i] >= v0 && ids[i] < v1)
      for (int c = 0; c < C; c++) want_te[static_cast<size_t>(ids[i] - v0) * C + c] += d[static_cast<size_t>(i) * C + c];
  k.embedding_backward(dwte.data(), dwpe.data(), d.data(), dl.data(), ids.data(), N, n, C, T, row0, v0, v1);
  EXPECT_EQ(dwte, want_te);
  EXPECT_EQ(dwpe, want_pe);
}

TEST(KernelBackend, MaskedLossMeanCountsTargetedRows) {
  KernelBackend& k = cpu_kernels();
  const std::vector<float> losses = {1.5f, 2.25f, 100.0f, 0.125f, 3.0f};
  const std::vector<int> targets = {0, 7, -1, 2, -1};
  EXPECT_FLOAT_EQ(k.masked_loss_mean(losses.data(), targets.data(), 5), (1.5 + 2.25 + 0.125) / 3);
  const std::vector<int> none = {-1, -1, -1, -1, -1};
  EXPECT_EQ(k.masked_loss_mean(losses.data(), none.data(), 5), 0.0f);
}

TEST(KernelBackend, CopyAndFill) {
  KernelBackend& k = cpu_kernels();
  const std::vector<float> a = random_vec(33, 7);
  std::vector<float> b(33, NAN);
  k.copy(b.data(), a.data(), a.size());
  EXPECT_EQ(a, b);
  k.fill(b.data(), -2.5f, 10);
  for (int i = 0; i < 33; i++) EXPECT_EQ(b[i], i < 10 ? -2.5f : a[i]);
}

TEST(KernelBackend, GemmF32MatchesATripleLoop) {
  KernelBackend& k = cpu_kernels();
  const int M = 13, N = 21, K = 17;
  for (bool tA : {false, true})
    for (bool tB : {false, true})
      for (bool acc : {false, true}) {
        const std::vector<float> A = random_vec(static_cast<size_t>(M) * K, 8), B = random_vec(static_cast<size_t>(K) * N, 9);
        std::vector<float> C = random_vec(static_cast<size_t>(M) * N, 10);
        std::vector<double> want(C.size());
        for (int i = 0; i < M; i++)
          for (int j = 0; j < N; j++) {
            double s = acc ? C[static_cast<size_t>(i) * N + j] : 0.0;
            for (int p = 0; p < K; p++) {
              const double a = tA ? A[static_cast<size_t>(p) * M + i] : A[static_cast<size_t>(i) * K + p];
              const double b = tB ? B[static_cast<size_t>(j) * K + p] : B[static_cast<size_t>(p) * N + j];
              s += a * b;
            }
            want[static_cast<size_t>(i) * N + j] = s;
          }
        k.gemm_f32(tA, tB, M, N, K, A.data(), B.data(), C.data(), acc);
        double d = 0, nrm = 0;
        for (size_t i = 0; i < C.size(); i++) {
          d += (C[i] - want[i]) * (C[i] - want[i]);
          nrm += want[i] * want[i];
        }
        EXPECT_LE(std::sqrt(d / nrm), 1e-5) << "transA " << tA << " transB " << tB << " accumulate " << acc;
      }
}

TEST(KernelBackend, CudaWithoutADeviceIsANamedError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device opens here: the error path is not reachable";
  try {
    kernels_for(Device::kCuda);
    FAIL() << "kernels_for(cuda) returned without a device";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("MEGASCALE_WITH_CUDA") != std::string::npos ||
                what.find("no CUDA device opens") != std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace ms
