// attention.cpp: flash-style causal attention (see attention.h).
// Layout of the work: the forward runs one task per (b, h, 64-query tile); each task walks the key
// tiles that intersect its causal/window band, computes the 64x64 score tile with a register-
// blocked micro-kernel, applies the online softmax and accumulates P·V. The backward runs one task
// per (b, h): the head's queries, dout and dq are packed into contiguous scratch; for each key tile
// it walks the query tiles that can see it, recomputes P from lse and accumulates dK, dV (written
// out per key tile) and dQ (written out at the end), touching only this head's channels of dqkv.
// Every hot loop is written once as an always-inline template and compiled twice: for AVX-512
// (target attribute) and for the x86-64-v2 baseline; the choice is made once per process.
#include "kernels/attention.h"

#include <algorithm>  // std::min, std::max
#include <bit>        // std::bit_cast
#include <cmath>      // std::sqrt, std::log, INFINITY
#include <cstddef>    // size_t
#include <cstdlib>    // std::getenv
#include <cstring>    // std::memcpy, std::memset
#include <string_view>

#include "base/aligned.h"  // AlignedBuffer
#include "base/check.h"  // MS_CHECK
#include "base/kernel_timing.h"  // KernelTimeScope
#include "kernels/cpu/attention_common.h"  // kTile, band, check_shapes
#include "kernels/cpu/simd_util.h"  // MS_AI, MS_TARGET_AVX512, use_avx512, thread_scratch, exp_approx


namespace ms {
namespace {

using namespace attention_detail;  // kTile, band, the softmax row steps, parallel_over_heads

// Register block of the micro-kernel: MR rows x NR columns of the output held in registers.
struct IsaGeneric { static constexpr int MR = 4, NR = 8; };    // 8 xmm accumulators
struct IsaAvx512 { static constexpr int MR = 4, NR = 64; };    // 16 zmm accumulators





// Full MR x NR block: C (+)= A B over K, accumulators in registers.
template <int MR, int NR>
MS_AI void gemm_block(float* __restrict C, int ldc, const float* __restrict A, int sar, int sak,
                      const float* __restrict B, int ldb, int K, bool accumulate) {
  float acc[MR][NR];
  for (int r = 0; r < MR; ++r)
#pragma omp simd
    for (int c = 0; c < NR; ++c) acc[r][c] = accumulate ? C[(size_t)r * ldc + c] : 0.0f;
  for (int k = 0; k < K; ++k) {
    const float* b = B + (size_t)k * ldb;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float a = A[(size_t)r * sar + (size_t)k * sak];
#pragma omp simd
      for (int c = 0; c < NR; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < MR; ++r)
#pragma omp simd
    for (int c = 0; c < NR; ++c) C[(size_t)r * ldc + c] = acc[r][c];
}

// Edge block (m <= MR rows, n <= NR columns), accumulating in memory.
MS_AI void gemm_edge(float* __restrict C, int ldc, const float* __restrict A, int sar, int sak,
                     const float* __restrict B, int ldb, int m, int n, int K, bool accumulate) {
  for (int r = 0; r < m; ++r) {
    float* c = C + (size_t)r * ldc;
    if (!accumulate) std::memset(c, 0, sizeof(float) * n);
    for (int k = 0; k < K; ++k) {
      const float a = A[(size_t)r * sar + (size_t)k * sak];
      const float* b = B + (size_t)k * ldb;
#pragma omp simd
      for (int x = 0; x < n; ++x) c[x] += a * b[x];
    }
  }
}

// C (M x N, row stride ldc) = A B, or += A B when accumulate. A(r, k) = A[r*sar + k*sak] (so
// sar=lda, sak=1 is A, sar=1, sak=lda is A^T of a row-major array); B is K x N, row stride ldb.
// The result of each element depends only on the shapes, never on threads.
template <class Isa>
MS_AI void gemm(float* __restrict C, int ldc, const float* __restrict A, int sar, int sak,
                const float* __restrict B, int ldb, int M, int N, int K, bool accumulate) {
  constexpr int MR = Isa::MR, NR = Isa::NR;
  int i = 0;
  for (; i + MR <= M; i += MR) {
    int j = 0;
    for (; j + NR <= N; j += NR)
      gemm_block<MR, NR>(C + (size_t)i * ldc + j, ldc, A + (size_t)i * sar, sar, sak, B + j, ldb, K,
                         accumulate);
    if (j < N)
      gemm_edge(C + (size_t)i * ldc + j, ldc, A + (size_t)i * sar, sar, sak, B + j, ldb, MR, N - j, K,
                accumulate);
  }
  if (i < M) gemm_edge(C + (size_t)i * ldc, ldc, A + (size_t)i * sar, sar, sak, B, ldb, M - i, N, K, accumulate);
}

// Loads a key/value tile: T_[d*kTile + jj] = src[jj][d] * s (transposed) and/or R_[jj*HS + d] =
// src[jj][d] * s (rows); rows jj >= nk are zero so that padded columns contribute nothing.
MS_AI void load_transposed(float* __restrict dst, const float* __restrict src, size_t stride, int nk, int HS) {
  for (int jj = 0; jj < kTile; ++jj) {
    if (jj < nk) {
      const float* s = src + jj * stride;
      for (int d = 0; d < HS; ++d) dst[(size_t)d * kTile + jj] = s[d];
    } else {
      for (int d = 0; d < HS; ++d) dst[(size_t)d * kTile + jj] = 0.0f;
    }
  }
}
MS_AI void load_rows(float* __restrict dst, const float* __restrict src, size_t stride, int n, int rows,
                     int HS, float s) {
  for (int i = 0; i < rows; ++i) {
    float* o = dst + (size_t)i * HS;
    if (i < n) {
      const float* x = src + i * stride;
#pragma omp simd
      for (int d = 0; d < HS; ++d) o[d] = x[d] * s;
    } else {
      std::memset(o, 0, sizeof(float) * HS);
    }
  }
}

// Prefetches rows [0, n) of a (rows x HS) strided block into cache: the next key tile's rows are
// 3C floats apart (a page each at GPT-2 sizes) and the hardware prefetcher does not follow them.
MS_AI void prefetch_rows(const float* src, size_t stride, int n, int HS) {
  for (int i = 0; i < n; ++i)
    for (int d = 0; d < HS; d += 16) __builtin_prefetch(src + i * stride + d);
}

size_t fwd_scratch_size(int HS) { return (size_t)4 * kTile * HS + kTile * kTile + 2 * kTile; }

// One forward task: query tile qt of head h of batch row b (its keys and values: kv head h / (NH/NKV)).
template <class Isa>
MS_AI void fwd_task(float* out, float* lse, const float* qkv, int T, int C, int NH, int NKV, int window, int b,
                    int h, int qt, float* scratch) {
  const int HS = C / NH;
  const size_t C3 = (size_t)C + 2 * (size_t)NKV * HS;  // a packed q|k|v row
  const float scale = 1.0f / std::sqrt((float)HS);
  float* Qs = scratch;              // kTile x HS, pre-scaled queries
  float* Kt = Qs + kTile * HS;      // HS x kTile, keys transposed
  float* V = Kt + HS * kTile;       // kTile x HS
  float* O = V + kTile * HS;        // kTile x HS, unnormalised output accumulator
  float* S = O + kTile * HS;        // kTile x kTile, scores then probabilities
  float* m = S + kTile * kTile;     // running max per row
  float* l = m + kTile;             // running sum per row
  const float* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
  const float* kbase = qkv + (size_t)b * T * C3 + C + (size_t)(h / (NH / NKV)) * HS;  // its key head
  const float* vbase = kbase + (size_t)NKV * HS;                                       // its value head
  const int i0 = qt * kTile, nq = std::min(kTile, T - i0);

  load_rows(Qs, base + i0 * C3, C3, nq, nq, HS, scale);
  std::memset(O, 0, sizeof(float) * nq * HS);
  for (int i = 0; i < nq; ++i) { m[i] = -INFINITY; l[i] = 0.0f; }

  const int kfirst = window > 0 ? std::max(0, i0 - window + 1) : 0, klast = i0 + nq - 1;
  for (int kt = kfirst / kTile; kt * kTile <= klast; ++kt) {
    const int j0 = kt * kTile, nk = std::min(kTile, T - j0);
    load_transposed(Kt, kbase + j0 * C3, C3, nk, HS);
    load_rows(V, vbase + j0 * C3, C3, nk, kTile, HS, 1.0f);
    if ((kt + 1) * kTile <= klast) {  // K and V rows of the next key tile
      const int nk1 = std::min(kTile, T - j0 - kTile);
      prefetch_rows(kbase + (j0 + kTile) * C3, C3, nk1, HS);
      prefetch_rows(vbase + (j0 + kTile) * C3, C3, nk1, HS);
    }
    gemm<Isa>(S, kTile, Qs, HS, 1, Kt, kTile, nq, kTile, HS, false);
    for (int i = 0; i < nq; ++i) {
      float* srow = S + i * kTile;
      int lo, hi;
      band(i0 + i, j0, nk, window, lo, hi);
      online_softmax_row(srow, lo, hi, m[i], l[i], O + (size_t)i * HS, HS, /*add_sum=*/true);
    }
    gemm<Isa>(O, HS, S, kTile, 1, V, HS, nq, HS, kTile, true);
  }
  for (int i = 0; i < nq; ++i)
    finish_row(out + ((size_t)b * T + i0 + i) * C + (size_t)h * HS, O + (size_t)i * HS, HS, m[i], l[i],
               lse + ((size_t)b * NH + h) * T + i0 + i);
}

MS_TARGET_AVX512 void fwd_task_avx512(float* out, float* lse, const float* qkv, int T, int C, int NH, int NKV,
                                      int window, int b, int h, int qt, float* scratch) {
  fwd_task<IsaAvx512>(out, lse, qkv, T, C, NH, NKV, window, b, h, qt, scratch);
}
void fwd_task_generic(float* out, float* lse, const float* qkv, int T, int C, int NH, int NKV, int window, int b,
                      int h, int qt, float* scratch) {
  fwd_task<IsaGeneric>(out, lse, qkv, T, C, NH, NKV, window, b, h, qt, scratch);
}

// Rows of the group's dK / dV accumulators: T rounded up to whole key tiles (a tile's product
// writes kTile rows).
int padded_rows(int T) { return (T + kTile - 1) / kTile * kTile; }
size_t bwd_scratch_size(int HS, int T) {
  return (size_t)3 * kTile * HS + 2 * kTile * kTile + (size_t)3 * T * HS + T + (size_t)2 * padded_rows(T) * HS;
}

// One backward task: all query heads of key/value head g of batch row b, in order (the r = NH/NKV
// heads that share it; r = 1 without grouped queries). Each head's queries, dout and dq are packed
// into contiguous per-thread scratch (T x HS each) so that the inner loops never touch the
// strided (B,T,QKV) arrays; dq is written to dqkv once per head. dK and dV accumulate over the
// group's heads in the group's accumulators (zeroed once: with r = 1 each element is the sum it
// was per key tile) and are written once at the end.
template <class Isa>
MS_AI void bwd_task(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                    int T, int C, int NH, int NKV, int window, int b, int g, float* scratch) {
  const int HS = C / NH, r = NH / NKV;
  const size_t C3 = (size_t)C + 2 * (size_t)NKV * HS;  // a packed q|k|v row
  const float scale = 1.0f / std::sqrt((float)HS);
  float* Kt = scratch;                   // HS x kTile, keys transposed
  float* Ks = Kt + HS * kTile;           // kTile x HS, keys * scale
  float* Vt = Ks + kTile * HS;           // HS x kTile, values transposed
  float* P = Vt + HS * kTile;            // kTile x kTile
  float* dS = P + kTile * kTile;         // kTile x kTile
  float* Qs = dS + kTile * kTile;        // T x HS, queries * scale
  float* dO = Qs + (size_t)T * HS;       // T x HS
  float* dQ = dO + (size_t)T * HS;       // T x HS
  float* D = dQ + (size_t)T * HS;        // T
  float* dKg = D + T;                    // padded_rows(T) x HS, the group's dK
  float* dVg = dKg + (size_t)padded_rows(T) * HS;
  const float* kbase = qkv + (size_t)b * T * C3 + C + (size_t)g * HS;
  const float* vbase = kbase + (size_t)NKV * HS;
  float* dkbase = dqkv + (size_t)b * T * C3 + C + (size_t)g * HS;
  float* dvbase = dkbase + (size_t)NKV * HS;
  std::memset(dKg, 0, sizeof(float) * 2 * padded_rows(T) * HS);
  for (int h = g * r; h < (g + 1) * r; ++h) {
    const float* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    float* dbase = dqkv + (size_t)b * T * C3 + (size_t)h * HS;
    const float* obase = out + (size_t)b * T * C + (size_t)h * HS;
    const float* dobase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float* L = lse + ((size_t)b * NH + h) * T;

    load_rows(Qs, base, C3, T, T, HS, scale);
    load_rows(dO, dobase, C, T, T, HS, 1.0f);
    std::memset(dQ, 0, sizeof(float) * T * HS);
    for (int t = 0; t < T; ++t) D[t] = row_dot(dO + (size_t)t * HS, obase + (size_t)t * C, HS);

    const int ntiles = (T + kTile - 1) / kTile;
    for (int kt = 0; kt < ntiles; ++kt) {
      const int j0 = kt * kTile, nk = std::min(kTile, T - j0);
      load_transposed(Kt, kbase + j0 * C3, C3, nk, HS);
      load_rows(Ks, kbase + j0 * C3, C3, nk, kTile, HS, scale);
      load_transposed(Vt, vbase + j0 * C3, C3, nk, HS);
      if (kt + 1 < ntiles) {  // K and V rows of the next key tile
        const int nk1 = std::min(kTile, T - j0 - kTile);
        prefetch_rows(kbase + (j0 + kTile) * C3, C3, nk1, HS);
        prefetch_rows(vbase + (j0 + kTile) * C3, C3, nk1, HS);
      }
      float* dK = dKg + (size_t)j0 * HS;  // kTile x HS of the group's accumulators
      float* dV = dVg + (size_t)j0 * HS;
      const int ilast = window > 0 ? std::min(T - 1, j0 + nk - 1 + window - 1) : T - 1;
      for (int qt = kt; qt * kTile <= ilast; ++qt) {
        const int i0 = qt * kTile, nq = std::min(kTile, T - i0);
        const float* Qi = Qs + (size_t)i0 * HS;
        const float* dOi = dO + (size_t)i0 * HS;
        gemm<Isa>(P, kTile, Qi, HS, 1, Kt, kTile, nq, kTile, HS, false);  // scores
        for (int i = 0; i < nq; ++i) {
          float* prow = P + i * kTile;
          int lo, hi;
          band(i0 + i, j0, nk, window, lo, hi);
          band_exp(prow, lo, hi, L[i0 + i]);
        }
        gemm<Isa>(dV, HS, P, 1, kTile, dOi, HS, kTile, HS, nq, true);      // dV += P^T dO
        gemm<Isa>(dS, kTile, dOi, HS, 1, Vt, kTile, nq, kTile, HS, false);  // dP = dO V^T
        for (int i = 0; i < nq; ++i) softmax_grad_row(dS + i * kTile, P + i * kTile, D[i0 + i]);
        gemm<Isa>(dQ + (size_t)i0 * HS, HS, dS, kTile, 1, Ks, HS, nq, HS, kTile, true);  // dQ += dS K*s
        gemm<Isa>(dK, HS, dS, 1, kTile, Qi, HS, kTile, HS, nq, true);                    // dK += dS^T Q*s
      }
    }
    for (int t = 0; t < T; ++t) std::memcpy(dbase + t * C3, dQ + (size_t)t * HS, sizeof(float) * HS);
  }  // query heads of the group
  for (int t = 0; t < T; ++t) {
    std::memcpy(dkbase + t * C3, dKg + (size_t)t * HS, sizeof(float) * HS);
    std::memcpy(dvbase + t * C3, dVg + (size_t)t * HS, sizeof(float) * HS);
  }
}

MS_TARGET_AVX512 void bwd_task_avx512(float* dqkv, const float* dout, const float* qkv, const float* out,
                                      const float* lse, int T, int C, int NH, int NKV, int window, int b, int g,
                                      float* scratch) {
  bwd_task<IsaAvx512>(dqkv, dout, qkv, out, lse, T, C, NH, NKV, window, b, g, scratch);
}
void bwd_task_generic(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                      int T, int C, int NH, int NKV, int window, int b, int g, float* scratch) {
  bwd_task<IsaGeneric>(dqkv, dout, qkv, out, lse, T, C, NH, NKV, window, b, g, scratch);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV, int window) {
  KernelTimeScope timing(KernelId::kAttentionForward);
  check_shapes(B, T, C, NH, NKV, window);
  const int HS = C / NH, ntiles = (T + kTile - 1) / kTile, BH = B * NH;
  const long ntasks = (long)BH * ntiles;
  const bool avx = use_avx512();
  const size_t scratch_n = fwd_scratch_size(HS);
#pragma omp parallel
  {
    float* scratch = thread_scratch(scratch_n);
#pragma omp for schedule(dynamic, 1)
    for (long task = 0; task < ntasks; ++task) {
      // Head-major order: consecutive tasks reuse the head's K/V rows from cache.
      const int bh = (int)(task / ntiles), qt = ntiles - 1 - (int)(task % ntiles);
      const int b = bh / NH, h = bh % NH;
      if (avx) fwd_task_avx512(out, lse, qkv, T, C, NH, NKV, window, b, h, qt, scratch);
      else fwd_task_generic(out, lse, qkv, T, C, NH, NKV, window, b, h, qt, scratch);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, int NKV, int window) {
  KernelTimeScope timing(KernelId::kAttentionBackward);
  check_shapes(B, T, C, NH, NKV, window);
  const bool avx = use_avx512();
  // One task per (b, key/value head): its query heads' dK, dV contributions meet in one thread.
  parallel_over_heads(B, NKV, bwd_scratch_size(C / NH, T), [&](int b, int g, float* scratch) {
    if (avx) bwd_task_avx512(dqkv, dout, qkv, out, lse, T, C, NH, NKV, window, b, g, scratch);
    else bwd_task_generic(dqkv, dout, qkv, out, lse, T, C, NH, NKV, window, b, g, scratch);
  });
}

}  // namespace ms
