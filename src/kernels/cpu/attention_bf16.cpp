// attention_bf16.cpp: flash-style attention with its tile products on the CPU's bf16 dot-product
// units (AVX512-BF16 vdpbf16ps: bf16 x bf16 products, exact in fp32, accumulated in fp32), the
// online softmax and every elementwise step in fp32 (see attention.h).
// Layout of the work: one task per (b, h) forward, per (b, key/value head) backward (its query
// heads in order, their dK and dV summed in the group's accumulators). A task first packs the head's
// operands once into per-thread scratch in the layouts the micro-kernel reads: row-major bf16 (the
// A operand, k contiguous), pair-interleaved "VNNI" bf16 (the B operand: element (2p, n) and
// (2p+1, n) side by side in one 32-bit lane), and transposes; every tile product then runs on
// contiguous data. Products whose natural output is transposed (dV = P^T dO, dK = dS^T Q) are
// computed as dV^T = dO^T P and dK^T = Q^T dS, so that only the head's operands, never a 64x64
// tile, need a transpose. Rows and columns are padded with zeros to the micro-kernel's block (4 x
// 16); padding never reaches an output.
#include <immintrin.h>

#include <algorithm>  // std::min, std::max
#include <cmath>      // std::sqrt, std::log, INFINITY
#include <cstdint>    // uint32_t
#include <cstring>    // std::memcpy, std::memset

#include "base/bf16.h"                   // bf16_t
#include "base/cpu_features.h"           // cpu_has_avx512_bf16
#include "base/kernel_timing.h"          // KernelTimeScope
#include "kernels/attention.h"
#include "kernels/cpu/attention_common.h"  // kTile, band, check_shapes
#include "kernels/cpu/simd_util.h"         // use_avx512, thread_scratch, exp_approx

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports once inlined here (a known false positive of the intrinsics, not of this code).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define MS_TARGET_BF16                                                                     \
  __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx512bf16,avx2,fma,"         \
                        "prefer-vector-width=512")))
#define MS_BF16_AI MS_TARGET_BF16 inline __attribute__((always_inline))

namespace ms {
namespace {

using namespace attention_detail;  // kTile, band, the softmax row steps, parallel_over_heads

bool use_bf16_units() {
  static const bool on = use_avx512() && cpu_has_avx512_bf16();
  return on;
}

MS_BF16_AI int load_pair(const bf16_t* p) {
  int v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Block of 4 rows x 16*NV columns: C (+)= A B. A: 4 rows of 2*K2 bf16 (row stride lda, even);
// B: K2 pair-rows of 16*NV 32-bit lanes (stride ldb).
template <int NV>
MS_BF16_AI void dp_block(float* __restrict C, int ldc, const bf16_t* __restrict A, int lda,
                         const uint32_t* __restrict B, int ldb, int K2, bool accumulate) {
  __m512 acc[4][NV];
  for (int r = 0; r < 4; ++r)
    for (int v = 0; v < NV; ++v)
      acc[r][v] = accumulate ? _mm512_loadu_ps(C + (size_t)r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int p = 0; p < K2; ++p) {
    __m512bh b[NV];
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(B + (size_t)p * ldb + 16 * v);
    for (int r = 0; r < 4; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(load_pair(A + (size_t)r * lda + 2 * p));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
    }
  }
  for (int r = 0; r < 4; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(C + (size_t)r * ldc + 16 * v, acc[r][v]);
}

// C (M x N fp32, row stride ldc) (+)= A (M x 2*K2, bf16 row-major) . B (2*K2 x N, pair-interleaved).
// M % 4 == 0, N % 16 == 0. Each element's sum runs over k in order: independent of threads.
MS_BF16_AI void dp_gemm(float* C, int ldc, const bf16_t* A, int lda, const uint32_t* B, int ldb, int M,
                        int N, int K2, bool accumulate) {
  for (int i = 0; i < M; i += 4) {
    float* c = C + (size_t)i * ldc;
    const bf16_t* a = A + (size_t)i * lda;
    int j = 0;
    for (; j + 64 <= N; j += 64) dp_block<4>(c + j, ldc, a, lda, B + j, ldb, K2, accumulate);
    switch ((N - j) / 16) {
      case 3: dp_block<3>(c + j, ldc, a, lda, B + j, ldb, K2, accumulate); break;
      case 2: dp_block<2>(c + j, ldc, a, lda, B + j, ldb, K2, accumulate); break;
      case 1: dp_block<1>(c + j, ldc, a, lda, B + j, ldb, K2, accumulate); break;
      default: break;
    }
  }
}

// 16 floats (n <= 16 valid, the rest zero) times s, rounded to bf16 (nearest even).
MS_BF16_AI __m256i cvt16(const float* src, int n, float s) {
  const __mmask16 mask = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << std::max(n, 0)) - 1);
  const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, src), _mm512_set1_ps(s));
  return (__m256i)_mm512_cvtneps_pbh(x);
}

// dst (rows x ld bf16, ld % 16 == 0) = src rows [0, n) (HS floats each, row stride) times s; rows
// [n, rows) and columns [HS, ld) zero.
MS_BF16_AI void pack_rows(bf16_t* dst, int ld, const float* src, size_t stride, int n, int rows, int HS, float s) {
  for (int t = 0; t < rows; ++t)
    for (int d = 0; d < ld; d += 16)
      _mm256_storeu_si256((__m256i*)(dst + (size_t)t * ld + d),
                          t < n ? cvt16(src + t * stride + d, HS - d, s) : _mm256_setzero_si256());
}

// Pair-interleaves rows (rows even, ld % 16 == 0): dst[(t/2)*ld + c] = src[t][c] | src[t+1][c] << 16.
MS_BF16_AI void pack_pairs(uint32_t* dst, const bf16_t* src, int ld, int rows) {
  for (int t = 0; t < rows; t += 2)
    for (int c = 0; c < ld; c += 16) {
      const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(src + (size_t)t * ld + c)));
      const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(src + (size_t)(t + 1) * ld + c)));
      _mm512_storeu_si512(dst + (size_t)(t / 2) * ld + c, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
}

// The pair-interleaved form of src^T: dst[p*ldT + t] = (src[t][2p], src[t][2p+1]) for a row-major
// src of rows x ld bf16 (the pair is already adjacent in src: a 32-bit transpose).
// Both transposes run in blocks of 32 source rows (rows % 32 == 0): the block's rows stay in L1 and
// every destination row gets one contiguous 64-128 byte run instead of 32 scattered writes.
MS_BF16_AI void pack_pairs_transposed(uint32_t* dst, int ldT, const bf16_t* src, int ld, int rows) {
  for (int t0 = 0; t0 < rows; t0 += 32)
    for (int p = 0; p < ld / 2; ++p) {
      uint32_t* o = dst + (size_t)p * ldT + t0;
      for (int t = 0; t < 32; ++t) std::memcpy(o + t, src + (size_t)(t0 + t) * ld + 2 * p, sizeof(uint32_t));
    }
}

// dst (ld x ldT bf16) = src^T for a row-major src of rows x ld bf16 (rows % 32 == 0).
MS_BF16_AI void transpose(bf16_t* dst, int ldT, const bf16_t* src, int ld, int rows) {
  for (int t0 = 0; t0 < rows; t0 += 32)
    for (int d = 0; d < ld; ++d) {
      bf16_t* o = dst + (size_t)d * ldT + t0;
      for (int t = 0; t < 32; ++t) o[t] = src[(size_t)(t0 + t) * ld + d];
    }
}

// Rounds rows [0, n) of a 64-column fp32 tile to bf16 (dst row-major, 64 columns); returns nothing.
// With sums != nullptr, sums[i] += the sum of row i's ROUNDED values (the softmax denominator must
// match the probabilities the product uses).
MS_BF16_AI void round_tile(bf16_t* dst, const float* src, int n, float* sums) {
  for (int i = 0; i < n; ++i) {
    __m512 acc = _mm512_setzero_ps();
    for (int c = 0; c < kTile; c += 16) {
      const __m256i b = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i * kTile + c));
      _mm256_storeu_si256((__m256i*)(dst + i * kTile + c), b);
      if (sums) acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
    }
    if (sums) sums[i] += _mm512_reduce_add_ps(acc);
  }
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Carves 64-byte aligned pieces out of one per-thread scratch buffer.
class Carver {
 public:
  explicit Carver(float* base) : p_(reinterpret_cast<char*>(base)) {}
  template <class T>
  T* take(size_t n) {
    T* r = reinterpret_cast<T*>(p_);
    p_ += (n * sizeof(T) + 63) / 64 * 64;
    return r;
  }

 private:
  char* p_;
};

// Scratch bytes: the head's packed operands (HSp = HS rounded up to 16, Tp = T to 64) and tiles.
size_t fwd_scratch_floats(int HSp, int Tp) {
  const size_t head = (size_t)Tp * HSp * 2;  // one bf16 copy of the head, in bytes
  const size_t bytes = 4 * head + kTile * kTile * (4 + 2) + (size_t)kTile * HSp * 4 + 2 * kTile * 4 + 8 * 64;
  return bytes / 4 + 16;
}
size_t bwd_scratch_floats(int HSp, int Tp) {
  const size_t head = (size_t)Tp * HSp * 2;
  const size_t bytes = 8 * head + (size_t)Tp * HSp * 4 + (size_t)Tp * 4 + 2 * kTile * kTile * 4 +
                       2 * kTile * kTile * 2 + 2 * kTile * kTile * 4 + 2 * (size_t)HSp * Tp * 4 + 16 * 64;
  return bytes / 4 + 16;
}

MS_TARGET_BF16 void fwd_head(float* out, float* lse, const float* qkv, int T, int C, int NH, int NKV, int window,
                             int b, int h, float* scratch) {
  const int HS = C / NH, HSp = round_up(HS, 16), ntiles = (T + kTile - 1) / kTile, Tp = ntiles * kTile;
  const size_t C3 = (size_t)C + 2 * (size_t)NKV * HS;  // a packed q|k|v row
  const float scale = 1.0f / std::sqrt((float)HS);
  Carver carve(scratch);
  bf16_t* Qb = carve.take<bf16_t>((size_t)Tp * HSp);     // queries * scale, row-major
  bf16_t* tmp = carve.take<bf16_t>((size_t)Tp * HSp);    // keys, then values, row-major
  uint32_t* KT = carve.take<uint32_t>((size_t)Tp * HSp / 2);  // K^T, pairs over d: [d/2][t]
  uint32_t* Vv = carve.take<uint32_t>((size_t)Tp * HSp / 2);  // V, pairs over t: [t/2][d]
  float* S = carve.take<float>(kTile * kTile);             // scores, then probabilities
  bf16_t* Pb = carve.take<bf16_t>(kTile * kTile);          // probabilities in bf16
  float* O = carve.take<float>((size_t)kTile * HSp);        // unnormalised output
  float* m = carve.take<float>(kTile);                      // running max per row
  float* l = carve.take<float>(kTile);                      // running sum per row
  const float* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
  const float* kbase = qkv + (size_t)b * T * C3 + C + (size_t)(h / (NH / NKV)) * HS;  // its key head
  const float* vbase = kbase + (size_t)NKV * HS;                                       // its value head

  pack_rows(Qb, HSp, base, C3, T, Tp, HS, scale);
  pack_rows(tmp, HSp, kbase, C3, T, Tp, HS, 1.0f);
  pack_pairs_transposed(KT, Tp, tmp, HSp, Tp);
  pack_rows(tmp, HSp, vbase, C3, T, Tp, HS, 1.0f);
  pack_pairs(Vv, tmp, HSp, Tp);

  for (int qt = 0; qt < ntiles; ++qt) {
    const int i0 = qt * kTile, nq = std::min(kTile, T - i0), nq4 = round_up(nq, 4);
    std::memset(O, 0, sizeof(float) * nq4 * HSp);
    std::memset(Pb, 0, sizeof(bf16_t) * kTile * kTile);
    for (int i = 0; i < nq; ++i) m[i] = -INFINITY, l[i] = 0.0f;
    const int kfirst = window > 0 ? std::max(0, i0 - window + 1) : 0, klast = i0 + nq - 1;
    for (int kt = kfirst / kTile; kt * kTile <= klast; ++kt) {
      const int j0 = kt * kTile, nk = std::min(kTile, T - j0);
      dp_gemm(S, kTile, Qb + (size_t)i0 * HSp, HSp, KT + j0, Tp, nq4, kTile, HSp / 2, false);
      for (int i = 0; i < nq; ++i) {
        float* srow = S + i * kTile;
        int lo, hi;
        band(i0 + i, j0, nk, window, lo, hi);
        // The tile's sum enters l after rounding (round_tile below).
        online_softmax_row(srow, lo, hi, m[i], l[i], O + (size_t)i * HSp, HSp, /*add_sum=*/false);
      }
      round_tile(Pb, S, nq, l);  // l += the rounded probabilities' row sums
      dp_gemm(O, HSp, Pb, kTile, Vv + (size_t)(j0 / 2) * HSp, HSp, nq4, HSp, kTile / 2, true);
    }
    for (int i = 0; i < nq; ++i)
      finish_row(out + ((size_t)b * T + i0 + i) * C + (size_t)h * HS, O + (size_t)i * HSp, HS, m[i], l[i],
                 lse + ((size_t)b * NH + h) * T + i0 + i);
  }
}

// Backward of key/value head g of batch row b: its keys and values packed once, then each of its
// r = NH/NKV query heads in order; dK^T and dV^T of every key tile accumulate over the heads in the
// group's accumulators (zeroed once: with r = 1 each is the sum it was per key tile) and are
// written once at the end.
MS_TARGET_BF16 void bwd_group(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                              int T, int C, int NH, int NKV, int window, int b, int g, float* scratch) {
  const int HS = C / NH, HSp = round_up(HS, 16), ntiles = (T + kTile - 1) / kTile, Tp = ntiles * kTile;
  const int r = NH / NKV;
  const size_t C3 = (size_t)C + 2 * (size_t)NKV * HS;  // a packed q|k|v row
  const float scale = 1.0f / std::sqrt((float)HS);
  Carver carve(scratch);
  const size_t head = (size_t)Tp * HSp;
  bf16_t* Qb = carve.take<bf16_t>(head);           // Q * scale, row-major
  bf16_t* QsT = carve.take<bf16_t>(head);          // (Q * scale)^T: [d][t]
  uint32_t* KT = carve.take<uint32_t>(head / 2);   // K^T, pairs over d
  uint32_t* Ksv = carve.take<uint32_t>(head / 2);  // K * scale, pairs over t
  uint32_t* VT = carve.take<uint32_t>(head / 2);   // V^T, pairs over d
  bf16_t* dOb = carve.take<bf16_t>(head);          // dout, row-major
  bf16_t* dOT = carve.take<bf16_t>(head);          // dout^T: [d][t]
  bf16_t* tmp = carve.take<bf16_t>(head);
  float* dQ = carve.take<float>(head);             // Tp x HSp
  float* D = carve.take<float>(Tp);                // rowsum(dout * out)
  float* P = carve.take<float>(kTile * kTile);
  float* dS = carve.take<float>(kTile * kTile);    // dP, then dS
  bf16_t* Pb = carve.take<bf16_t>(kTile * kTile);
  bf16_t* dSb = carve.take<bf16_t>(kTile * kTile);
  uint32_t* Pv = carve.take<uint32_t>(kTile * kTile / 2);
  uint32_t* dSv = carve.take<uint32_t>(kTile * kTile / 2);
  float* dKTg = carve.take<float>((size_t)HSp * Tp);  // per key tile: dK^T of the tile, [d][j]
  float* dVTg = carve.take<float>((size_t)HSp * Tp);
  const float* kbase = qkv + (size_t)b * T * C3 + C + (size_t)g * HS;
  const float* vbase = kbase + (size_t)NKV * HS;
  float* dkbase = dqkv + (size_t)b * T * C3 + C + (size_t)g * HS;
  float* dvbase = dkbase + (size_t)NKV * HS;

  pack_rows(tmp, HSp, kbase, C3, T, Tp, HS, 1.0f);
  pack_pairs_transposed(KT, Tp, tmp, HSp, Tp);
  pack_rows(tmp, HSp, kbase, C3, T, Tp, HS, scale);
  pack_pairs(Ksv, tmp, HSp, Tp);
  pack_rows(tmp, HSp, vbase, C3, T, Tp, HS, 1.0f);
  pack_pairs_transposed(VT, Tp, tmp, HSp, Tp);
  std::memset(dKTg, 0, sizeof(float) * 2 * HSp * Tp);
  for (int h = g * r; h < (g + 1) * r; ++h) {
    const float* base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    float* dbase = dqkv + (size_t)b * T * C3 + (size_t)h * HS;
    const float* obase = out + (size_t)b * T * C + (size_t)h * HS;
    const float* dobase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float* L = lse + ((size_t)b * NH + h) * T;
    pack_rows(Qb, HSp, base, C3, T, Tp, HS, scale);
    transpose(QsT, Tp, Qb, HSp, Tp);
    pack_rows(dOb, HSp, dobase, C, T, Tp, HS, 1.0f);
    transpose(dOT, Tp, dOb, HSp, Tp);
    std::memset(dQ, 0, sizeof(float) * head);
    for (int t = 0; t < Tp; ++t)  // fp32, from the fp32 arrays
      D[t] = t < T ? row_dot(dobase + (size_t)t * C, obase + (size_t)t * C, HS) : 0.0f;
    for (int kt = 0; kt < ntiles; ++kt) {
      const int j0 = kt * kTile, nk = std::min(kTile, T - j0);
      float* dKT = dKTg + (size_t)kt * HSp * kTile;  // the tile's accumulators
      float* dVT = dVTg + (size_t)kt * HSp * kTile;
      const int ilast = window > 0 ? std::min(T - 1, j0 + nk - 1 + window - 1) : T - 1;
      for (int qt = kt; qt * kTile <= ilast; ++qt) {
        const int i0 = qt * kTile, nq = std::min(kTile, T - i0), nq4 = round_up(nq, 4);
        dp_gemm(P, kTile, Qb + (size_t)i0 * HSp, HSp, KT + j0, Tp, nq4, kTile, HSp / 2, false);  // scores
        for (int i = 0; i < nq4; ++i) {
          float* prow = P + i * kTile;
          if (i >= nq) {
            std::memset(prow, 0, sizeof(float) * kTile);
            continue;
          }
          int lo, hi;
          band(i0 + i, j0, nk, window, lo, hi);
          band_exp(prow, lo, hi, L[i0 + i]);
        }
        round_tile(Pb, P, nq4, nullptr);
        pack_pairs(Pv, Pb, kTile, nq4);
        dp_gemm(dVT, kTile, dOT + i0, Tp, Pv, kTile, HSp, kTile, nq4 / 2, true);  // dV^T += dO^T P
        dp_gemm(dS, kTile, dOb + (size_t)i0 * HSp, HSp, VT + j0, Tp, nq4, kTile, HSp / 2, false);  // dP = dO V^T
        for (int i = 0; i < nq4; ++i) softmax_grad_row(dS + i * kTile, P + i * kTile, D[i0 + i]);
        round_tile(dSb, dS, nq4, nullptr);
        pack_pairs(dSv, dSb, kTile, nq4);
        dp_gemm(dQ + (size_t)i0 * HSp, HSp, dSb, kTile, Ksv + (size_t)(j0 / 2) * HSp, HSp, nq4, HSp, kTile / 2,
                true);                                                              // dQ += dS K*s
        dp_gemm(dKT, kTile, QsT + i0, Tp, dSv, kTile, HSp, kTile, nq4 / 2, true);  // dK^T += (Q*s)^T dS
      }
    }
    for (int t = 0; t < T; ++t) std::memcpy(dbase + t * C3, dQ + (size_t)t * HSp, sizeof(float) * HS);
  }
  // dK, dV rows = columns of each tile's dK^T, dV^T: gathered 16 at a time, one vector store.
  const __m512i col = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(kTile));
  for (int kt = 0; kt < ntiles; ++kt) {
    const int j0 = kt * kTile, nk = std::min(kTile, T - j0);
    const float* dKT = dKTg + (size_t)kt * HSp * kTile;
    const float* dVT = dVTg + (size_t)kt * HSp * kTile;
    for (int jj = 0; jj < nk; ++jj) {
      float* dk = dkbase + (j0 + jj) * C3;
      float* dv = dvbase + (j0 + jj) * C3;
      for (int d = 0; d < HS; d += 16) {
        const __mmask16 mask = HS - d >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (HS - d)) - 1);
        const __m512i idx = _mm512_add_epi32(col, _mm512_set1_epi32(d * kTile + jj));
        _mm512_mask_storeu_ps(dk + d, mask, _mm512_i32gather_ps(idx, dKT, 4));
        _mm512_mask_storeu_ps(dv + d, mask, _mm512_i32gather_ps(idx, dVT, 4));
      }
    }
  }
}

}  // namespace

bool attention_bf16_on_dot_product_units() { return use_bf16_units(); }

void attention_forward_bf16(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV,
                            int window) {
  KernelTimeScope timing(KernelId::kAttentionForward);
  if (!use_bf16_units()) return attention_forward(out, lse, qkv, B, T, C, NH, NKV, window);
  check_shapes(B, T, C, NH, NKV, window);
  const int HS = C / NH;
  parallel_over_heads(B, NH, fwd_scratch_floats(round_up(HS, 16), round_up(T, kTile)), [&](int b, int h, float* scratch) {
    fwd_head(out, lse, qkv, T, C, NH, NKV, window, b, h, scratch);
  });
}

void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out,
                             const float* lse, int B, int T, int C, int NH, int NKV, int window) {
  KernelTimeScope timing(KernelId::kAttentionBackward);
  if (!use_bf16_units()) return attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, NKV, window);
  check_shapes(B, T, C, NH, NKV, window);
  const int HS = C / NH;
  parallel_over_heads(B, NKV, bwd_scratch_floats(round_up(HS, 16), round_up(T, kTile)), [&](int b, int g, float* scratch) {
    bwd_group(dqkv, dout, qkv, out, lse, T, C, NH, NKV, window, b, g, scratch);
  });
}

}  // namespace ms
