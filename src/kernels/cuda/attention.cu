// attention.cu: flash-style causal attention (FlashAttention-2) on the GPU, the CUDA form of
// kernels/attention.h with grouped-query heads (backend.h's NKV): qkv and dqkv (overwritten) rows of
// (NH + 2*NKV)*HS floats, the NH query heads, then the NKV key heads, then the NKV value heads; query
// head h reads kv head h / (NH/NKV); out (B,T,C = NH*HS), lse (B,NH,T); same causal / sliding-window
// band and tile size, 64. NKV == NH is multi-head attention (rows 3C wide, the same addresses, so
// the same bits as before NKV existed).
// Layout of the work (one 256-thread block per tile, 16 x 16 threads, each owning a 4 x 4 micro-tile
// of every 64 x 64 score tile: rows ty + 16r, columns tx + 16c, and the same rows of the output):
//  - forward: one block per (64-query tile, b*h); it walks the key tiles that meet its band (tiles
//    wholly outside the window are never loaded: time grows with W, not T), online softmax in
//    registers (row max / sum over the 16 threads of a half-warp by a fixed xor-shuffle tree), P
//    through shared memory into O += P V; out = O / l, lse = m + log l.
//  - backward, two kernels, no atomics: one block per (64-key tile, b*kv head) walks, for each of
//    the kv head's NH/NKV query heads in ascending order, the query tiles that see it and accumulates
//    dK, dV in registers (P recomputed from lse, dS = P (dP - D)): the group's sum in a fixed order;
//    one block per (64-query tile, b*h) walks the key tiles and accumulates dQ. D_i =
//    rowsum(dout_i * out_i) is computed by each block for its query rows (the same function, so the
//    same bits in both). Grouped queries re-load their kv head's tiles per query head (forward, dQ).
// Every sum has a fixed order: the same inputs give the same bits on every run.
// fp32: plain fp32 FMA tiles (fmaf: one rounding per product-add; --fmad=false elsewhere). The bf16
// variants round the operands of every tile product to bf16 (Q, K, V, dout on load; P and dS when
// stored), accumulate in fp32 and sum the rounded probabilities into the softmax denominator, as the
// CPU's attention_*_bf16 define them (CUDA cores, not tensor cores, in this version).
// Limits: HS = C / NH <= 128 (shared memory); other shapes throw ms::Error (through device_call_failed:
// base/check.h's fmt does not compile under nvcc).
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda_kernels.h"

namespace ms::cuda {
namespace {
using detail::st;

constexpr int kTile = 64, kThreads = 256, kPL = kTile + 1;  // tile rows, block size, P row stride
constexpr int kMaxHS = 128;
constexpr float kNegInf = -__builtin_huge_valf();

template <bool R>
__device__ __forceinline__ float rnd(float x) {
  if constexpr (R) return detail::bf16_bits_to_f32(detail::f32_to_bf16_bits(x));
  else return x;
}

// dst (kTile rows, row stride ld) = src rows [0, n) (row stride `stride`) * s, rounded to bf16 when
// R; rows >= n are zero.
template <bool R>
__device__ void load_tile(float* dst, int ld, const float* src, size_t stride, int n, int HS, float s) {
  for (int idx = threadIdx.x; idx < kTile * HS; idx += kThreads) {
    const int r = idx / HS, d = idx - r * HS;
    dst[r * ld + d] = r < n ? rnd<R>(src[r * stride + d] * s) : 0.f;
  }
}

// acc[r][c] = sum_d A[ty+16r][d] * B[tx+16c][d] (both kTile x HS, row stride ld), d ascending.
__device__ __forceinline__ void tile_dot(float (&acc)[4][4], const float* A, const float* B, int ld, int HS,
                                         int ty, int tx) {
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[r][c] = 0.f;
  for (int d = 0; d < HS; ++d) {
    float a[4], b[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      a[k] = A[(ty + 16 * k) * ld + d];
      b[k] = B[(tx + 16 * k) * ld + d];
    }
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
  }
}

// Over the 16 lanes of a half-warp (one row of micro-tiles), a fixed xor tree: every lane gets the
// same bits.
__device__ __forceinline__ float half_max(float v) {
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float half_sum(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Query i may attend key j (absolute positions).
__device__ __forceinline__ bool allowed(int i, int j, int T, int window) {
  return i < T && j <= i && (window == 0 || j > i - window);
}

struct Args {
  float* dqkv;
  float* out;
  float* lse;
  const float* qkv;
  const float* dout;
  const float* fout;  // the forward's out (backward)
  const float* flse;  // the forward's lse (backward)
  int T, C, NH, NKV, window;
  float scale;
};

// Where a batch's rows, a query head and a kv head's keys / values sit in qkv / dqkv: rows of
// W = (NH + 2 NKV) HS floats; query head h at h HS, keys of kv head k at (NH + k) HS, its values NKV HS
// further.
struct Packed {
  size_t W;   // row width
  int G;      // query heads per kv head
  __device__ explicit Packed(const Args& a)
      : W(static_cast<size_t>(a.NH + 2 * a.NKV) * (a.C / a.NH)), G(a.NH / a.NKV) {}
  __device__ size_t batch(const Args& a, int b) const { return static_cast<size_t>(b) * a.T * W; }
  __device__ size_t query(const Args& a, int h) const { return static_cast<size_t>(h) * (a.C / a.NH); }
  __device__ size_t key(const Args& a, int kv) const { return static_cast<size_t>(a.NH + kv) * (a.C / a.NH); }
  __device__ size_t value(const Args& a, int kv) const {
    return static_cast<size_t>(a.NH + a.NKV + kv) * (a.C / a.NH);
  }
};

// sL[i], sD[i] for the query tile at i0 (nq rows): the forward's lse and D = rowsum(dout * out);
// 0 for rows >= nq. One warp per row, lanes over d, then warp_sum (fixed order).
__device__ void row_stats(float* sL, float* sD, const Args& a, int b, int h, int i0, int nq) {
  const int HS = a.C / a.NH, lane = threadIdx.x & 31;
  for (int i = threadIdx.x >> 5; i < kTile; i += kThreads / 32) {
    float s = 0.f;
    if (i < nq) {
      const size_t off = (static_cast<size_t>(b) * a.T + i0 + i) * a.C + static_cast<size_t>(h) * HS;
      for (int d = lane; d < HS; d += 32) s = fmaf(a.dout[off + d], a.fout[off + d], s);
    }
    s = detail::warp_sum(s);
    if (lane == 0) {
      sD[i] = i < nq ? s : 0.f;
      sL[i] = i < nq ? a.flse[(static_cast<size_t>(b) * a.NH + h) * a.T + i0 + i] : 0.f;
    }
  }
}

// acc[r][c] += sum_j S[row r, j] * M[j, col c] over one key tile: this thread's 4 rows (ty + 16 r) of
// the kTile x kTile tile S (row stride kPL) times the kTile x HS tile M (row stride ld), columns
// tx + 16 c; one fmaf per product in j order, so the result is the same bits on every run.
template <int NC>
__device__ __forceinline__ void accumulate_rows_times_tile(float (&acc)[4][NC], const float* S, const float* M, int ld,
                                                           int HS, int ty, int tx) {
  for (int j = 0; j < kTile; ++j) {
    float m[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) m[c] = tx + 16 * c < HS ? M[j * ld + tx + 16 * c] : 0.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float p = S[(ty + 16 * r) * kPL + j];
#pragma unroll
      for (int c = 0; c < NC; ++c) acc[r][c] = fmaf(p, m[c], acc[r][c]);
    }
  }
}

template <int NC, bool R>
__global__ void __launch_bounds__(kThreads) fwd_kernel(Args a) {
  extern __shared__ float sm[];
  const int HS = a.C / a.NH, ld = HS + 1, T = a.T;
  float *sQ = sm, *sK = sQ + kTile * ld, *sV = sK + kTile * ld, *sP = sV + kTile * ld;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
  const Packed pk(a);
  const size_t W = pk.W;
  const float* rows = a.qkv + pk.batch(a, b);
  const float* qbase = rows + pk.query(a, h);
  const float *kbase = rows + pk.key(a, h / pk.G), *vbase = rows + pk.value(a, h / pk.G);
  const int i0 = qt * kTile, nq = min(kTile, T - i0);
  load_tile<R>(sQ, ld, qbase + i0 * W, W, nq, HS, a.scale);
  float m[4], l[4], o[4][NC];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    m[r] = kNegInf;
    l[r] = 0.f;
#pragma unroll
    for (int c = 0; c < NC; ++c) o[r][c] = 0.f;
  }
  const int kfirst = a.window > 0 ? max(0, i0 - a.window + 1) : 0, klast = i0 + nq - 1;
  for (int j0 = (kfirst / kTile) * kTile; j0 <= klast; j0 += kTile) {
    const int nk = min(kTile, T - j0);
    __syncthreads();  // the previous tile's sK, sV, sP are read
    load_tile<R>(sK, ld, kbase + j0 * W, W, nk, HS, 1.f);
    load_tile<R>(sV, ld, vbase + j0 * W, W, nk, HS, 1.f);
    __syncthreads();
    float s[4][4];
    tile_dot(s, sQ, sK, ld, HS, ty, tx);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = i0 + ty + 16 * r;
      float mx = kNegInf;
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (allowed(i, j0 + tx + 16 * c, T, a.window)) mx = fmaxf(mx, s[r][c]);
      const float mn = fmaxf(m[r], half_max(mx));
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const bool ok = mn != kNegInf && allowed(i, j0 + tx + 16 * c, T, a.window);
        const float p = ok ? rnd<R>(expf(s[r][c] - mn)) : 0.f;
        sP[(ty + 16 * r) * kPL + tx + 16 * c] = p;
        sum += p;
      }
      sum = half_sum(sum);
      if (mn != kNegInf) {  // the row has a key in this tile
        const float corr = expf(m[r] - mn);  // 0 on the row's first tile
        l[r] = l[r] * corr + sum;
        m[r] = mn;
#pragma unroll
        for (int c = 0; c < NC; ++c) o[r][c] *= corr;
      }
    }
    __syncthreads();
    accumulate_rows_times_tile<NC>(o, sP, sV, ld, HS, ty, tx);  // O += P V
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = ty + 16 * r;
    if (i >= nq) continue;
    float* orow = a.out + (static_cast<size_t>(b) * T + i0 + i) * a.C + static_cast<size_t>(h) * HS;
    const float inv = 1.f / l[r];
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (tx + 16 * c < HS) orow[tx + 16 * c] = o[r][c] * inv;
    if (tx == 0) a.lse[static_cast<size_t>(bh) * T + i0 + i] = m[r] + logf(l[r]);
  }
}

// P and dS of the current (query tile i0, key tile j0) pair into sP (if not null) and sdS, rows =
// queries, columns = keys: P = exp(Qs K^T - lse) in the band, dS = P (dO V^T - D).
template <bool R>
__device__ __forceinline__ void probs_and_grads(float* sP, float* sdS, const float* sQ, const float* sK,
                                                const float* sdO, const float* sV, const float* sL,
                                                const float* sD, int ld, int HS, int i0, int j0, int T,
                                                int window, int ty, int tx) {
  float s[4][4], dp[4][4];
  tile_dot(s, sQ, sK, ld, HS, ty, tx);
  tile_dot(dp, sdO, sV, ld, HS, ty, tx);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int li = ty + 16 * r;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int lj = tx + 16 * c;
      const float p = allowed(i0 + li, j0 + lj, T, window) ? rnd<R>(expf(s[r][c] - sL[li])) : 0.f;
      if (sP != nullptr) sP[li * kPL + lj] = p;
      sdS[li * kPL + lj] = rnd<R>(p * (dp[r][c] - sD[li]));
    }
  }
}

// One block per (64-key tile, b * NKV + kv head): dK, dV of the tile summed over the kv head's query
// heads h = kv G .. kv G + G - 1 in ascending order, each over its query tiles in ascending order.
template <int NC, bool R>
__global__ void __launch_bounds__(kThreads) bwd_dkdv_kernel(Args a) {
  extern __shared__ float sm[];
  const int HS = a.C / a.NH, ld = HS + 1, T = a.T;
  float *sK = sm, *sV = sK + kTile * ld, *sQ = sV + kTile * ld, *sdO = sQ + kTile * ld;
  float *sP = sdO + kTile * ld, *sdS = sP + kTile * kPL, *sL = sdS + kTile * kPL, *sD = sL + kTile;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int kt = blockIdx.x, bkv = blockIdx.y, b = bkv / a.NKV, kv = bkv % a.NKV;
  const Packed pk(a);
  const size_t W = pk.W;
  const float* rows = a.qkv + pk.batch(a, b);
  const int j0 = kt * kTile, nk = min(kTile, T - j0);
  load_tile<R>(sK, ld, rows + pk.key(a, kv) + j0 * W, W, nk, HS, 1.f);
  load_tile<R>(sV, ld, rows + pk.value(a, kv) + j0 * W, W, nk, HS, 1.f);
  float dk[4][NC], dv[4][NC];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) dk[r][c] = dv[r][c] = 0.f;
  const int ilast = a.window > 0 ? min(T - 1, j0 + nk - 1 + a.window - 1) : T - 1;
  for (int h = kv * pk.G; h < (kv + 1) * pk.G; ++h) {
    const float* qbase = rows + pk.query(a, h);
    const float* dobase = a.dout + static_cast<size_t>(b) * T * a.C + static_cast<size_t>(h) * HS;
    for (int i0 = j0; i0 <= ilast; i0 += kTile) {
      const int nq = min(kTile, T - i0);
      __syncthreads();  // the previous query tile's shared arrays are read
      load_tile<R>(sQ, ld, qbase + i0 * W, W, nq, HS, a.scale);
      load_tile<R>(sdO, ld, dobase + static_cast<size_t>(i0) * a.C, a.C, nq, HS, 1.f);
      row_stats(sL, sD, a, b, h, i0, nq);
      __syncthreads();
      probs_and_grads<R>(sP, sdS, sQ, sK, sdO, sV, sL, sD, ld, HS, i0, j0, T, a.window, ty, tx);
      __syncthreads();
      for (int i = 0; i < kTile; ++i) {  // dV += P^T dO, dK += dS^T Qs
        float g[NC], q[NC];
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const bool in = tx + 16 * c < HS;
          g[c] = in ? sdO[i * ld + tx + 16 * c] : 0.f;
          q[c] = in ? sQ[i * ld + tx + 16 * c] : 0.f;
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float p = sP[i * kPL + ty + 16 * r], ds = sdS[i * kPL + ty + 16 * r];
#pragma unroll
          for (int c = 0; c < NC; ++c) {
            dv[r][c] = fmaf(p, g[c], dv[r][c]);
            dk[r][c] = fmaf(ds, q[c], dk[r][c]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int jj = ty + 16 * r;
    if (jj >= nk) continue;
    float* row = a.dqkv + pk.batch(a, b) + static_cast<size_t>(j0 + jj) * W;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (tx + 16 * c >= HS) continue;
      row[pk.key(a, kv) + tx + 16 * c] = dk[r][c];
      row[pk.value(a, kv) + tx + 16 * c] = dv[r][c];
    }
  }
}

template <int NC, bool R>
__global__ void __launch_bounds__(kThreads) bwd_dq_kernel(Args a) {
  extern __shared__ float sm[];
  const int HS = a.C / a.NH, ld = HS + 1, T = a.T;
  float *sQ = sm, *sdO = sQ + kTile * ld, *sK = sdO + kTile * ld, *sV = sK + kTile * ld;
  float *sdS = sV + kTile * ld, *sL = sdS + kTile * kPL, *sD = sL + kTile;
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
  const Packed pk(a);
  const size_t W = pk.W;
  const float* rows = a.qkv + pk.batch(a, b);
  const float *kbase = rows + pk.key(a, h / pk.G), *vbase = rows + pk.value(a, h / pk.G);
  const int i0 = qt * kTile, nq = min(kTile, T - i0);
  load_tile<R>(sQ, ld, rows + pk.query(a, h) + i0 * W, W, nq, HS, a.scale);
  load_tile<R>(sdO, ld, a.dout + (static_cast<size_t>(b) * T + i0) * a.C + static_cast<size_t>(h) * HS, a.C, nq,
               HS, 1.f);
  row_stats(sL, sD, a, b, h, i0, nq);
  float dq[4][NC];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) dq[r][c] = 0.f;
  const int kfirst = a.window > 0 ? max(0, i0 - a.window + 1) : 0, klast = i0 + nq - 1;
  for (int j0 = (kfirst / kTile) * kTile; j0 <= klast; j0 += kTile) {
    const int nk = min(kTile, T - j0);
    __syncthreads();
    load_tile<R>(sK, ld, kbase + j0 * W, W, nk, HS, 1.f);
    load_tile<R>(sV, ld, vbase + j0 * W, W, nk, HS, 1.f);
    __syncthreads();
    probs_and_grads<R>(nullptr, sdS, sQ, sK, sdO, sV, sL, sD, ld, HS, i0, j0, T, a.window, ty, tx);
    __syncthreads();
    accumulate_rows_times_tile<NC>(dq, sdS, sK, ld, HS, ty, tx);  // dQ += dS K
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = ty + 16 * r;
    if (i >= nq) continue;
    float* row = a.dqkv + pk.batch(a, b) + static_cast<size_t>(i0 + i) * W + pk.query(a, h);
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (tx + 16 * c < HS) row[tx + 16 * c] = dq[r][c] * a.scale;
  }
}

// Shared memory of each kernel, in bytes, for head size HS.
size_t fwd_smem(int HS) { return sizeof(float) * (3 * kTile * (HS + 1) + kTile * kPL); }
size_t dkdv_smem(int HS) { return sizeof(float) * (4 * kTile * (HS + 1) + 2 * kTile * kPL + 2 * kTile); }
size_t dq_smem(int HS) { return sizeof(float) * (4 * kTile * (HS + 1) + kTile * kPL + 2 * kTile); }

// Launches kernel K on (tiles, BH) blocks with `smem` bytes of dynamic shared memory (the opt-in
// above 48 KiB is set on every launch, to the largest head size's need: a host-side attribute write).
template <typename K>
void launch(K kernel, size_t max_smem, size_t smem, int tiles, int BH, const Args& a, Stream s) {
  MS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(max_smem)));
  kernel<<<dim3(tiles, BH), kThreads, smem, st(s)>>>(a);
  MS_CUDA_CHECK_LAUNCH();
}

enum class Pass { kForward, kBackward };

template <int NC, bool R>
void run(Pass pass, const Args& a, int B, Stream s) {
  const int HS = a.C / a.NH, tiles = (a.T + kTile - 1) / kTile;
  if (pass == Pass::kForward) {
    launch(fwd_kernel<NC, R>, fwd_smem(kMaxHS), fwd_smem(HS), tiles, B * a.NH, a, s);
  } else {  // dK/dV per kv head, dQ per query head
    launch(bwd_dkdv_kernel<NC, R>, dkdv_smem(kMaxHS), dkdv_smem(HS), tiles, B * a.NKV, a, s);
    launch(bwd_dq_kernel<NC, R>, dq_smem(kMaxHS), dq_smem(HS), tiles, B * a.NH, a, s);
  }
}

template <bool R>
void dispatch(Pass pass, const Args& a, int B, Stream s) {
  const int HS = a.C > 0 && a.NH > 0 ? a.C / a.NH : 0;
  if (B <= 0 || a.T <= 0 || HS <= 0 || a.C % a.NH != 0 || a.NKV <= 0 || a.NH % a.NKV != 0 || a.window < 0 ||
      HS > kMaxHS)
    device_call_failed(__FILE__, __LINE__, "attention shape check", 0,
                       ("B=" + std::to_string(B) + " T=" + std::to_string(a.T) + " C=" + std::to_string(a.C) +
                        " NH=" + std::to_string(a.NH) + " NKV=" + std::to_string(a.NKV) +
                        " window=" + std::to_string(a.window) + " (C divisible by NH, NH by NKV, head size <= " +
                        std::to_string(kMaxHS) + ", window >= 0)")
                           .c_str());
  if (HS <= 16) run<1, R>(pass, a, B, s);
  else if (HS <= 32) run<2, R>(pass, a, B, s);
  else if (HS <= 64) run<4, R>(pass, a, B, s);
  else run<8, R>(pass, a, B, s);
}

Args fwd_args(float* out, float* lse, const float* qkv, int T, int C, int NH, int NKV, int window) {
  return Args{nullptr, out, lse, qkv, nullptr, nullptr, nullptr, T, C, NH, NKV, window,
              1.f / sqrtf(static_cast<float>(C / NH))};
}
Args bwd_args(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse, int T, int C,
              int NH, int NKV, int window) {
  return Args{dqkv, nullptr, nullptr, qkv, dout, out, lse, T, C, NH, NKV, window,
              1.f / sqrtf(static_cast<float>(C / NH))};
}
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV, int window,
                       Stream s) {
  dispatch<false>(Pass::kForward, fwd_args(out, lse, qkv, T, C, NH, NKV, window), B, s);
}
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int B, int T, int C, int NH, int NKV, int window, Stream s) {
  dispatch<false>(Pass::kBackward, bwd_args(dqkv, dout, qkv, out, lse, T, C, NH, NKV, window), B, s);
}
void attention_forward_bf16(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int NKV,
                            int window, Stream s) {
  dispatch<true>(Pass::kForward, fwd_args(out, lse, qkv, T, C, NH, NKV, window), B, s);
}
void attention_backward_bf16(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                             int B, int T, int C, int NH, int NKV, int window, Stream s) {
  dispatch<true>(Pass::kBackward, bwd_args(dqkv, dout, qkv, out, lse, T, C, NH, NKV, window), B, s);
}

}  // namespace ms::cuda
