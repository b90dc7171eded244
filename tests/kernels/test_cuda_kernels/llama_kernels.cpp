// test_cuda_kernels/llama_kernels.cpp (part of test_cuda_kernels, label gpu): the CUDA kernels of
// Llama-style models against their oracles, in cuda_test_util.h's frame (fresh random inputs, NaN-
// poisoned outputs that must all be written, every kernel run twice for the same bits):
//  - RMSNorm forward / backward (dinp and dweight accumulated) against rmsnorm.h, rel L2 <= 1e-5;
//  - SwiGLU forward (fp32, bf16) and backward against swiglu.h, rel L2 <= 1e-5 (bf16 output 1e-2, and
//    exactly the GPU's fp32 output rounded), saturated gates included;
//  - RoPE forward / backward against rope.h bit for bit (the same operations, no fma), on row ranges
//    that do not start at 0 and rows past T (position r % T), for NKV = NH, 2 and 1;
//  - grouped-query attention (NH = 8, NKV in {8, 4, 2, 1}, T = 200, full and sliding windows, fp32
//    and bf16 operands): against a naive double-precision reference (kv heads expanded; rel L2 <=
//    1e-5 fp32, <= 1e-2 bf16 on the operands the kernels round); against the GPU's own multi-head
//    attention on the qkv with its kv heads copied (forward and dQ bit for bit, dK / dV the group
//    sums within 1e-5); against the CPU backend where NKV == NH; W >= T gives W = 0's bits;
//  - the Llama-style entries through the CUDA KernelBackend allocate no device memory after warm-up.
#include <algorithm>
#include <cmath>
#include <iterator>  // std::size
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "base/bf16.h"
#include "base/device.h"
#include "kernels/backend.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_test_util.h"  // tests/kernels/: the fixture and helpers
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace ms {
namespace {

using namespace cuda_test;

TEST_F(CudaKernels, RmsNormMatchesCpu) {
  for (const auto& [N, C, eps] : std::vector<std::tuple<int, int, float>>{
           {4096, 768, 1e-5f}, {1024, 4096, 1e-6f}, {37, 770, 1e-6f}, {1, 3, 1e-5f}}) {
    const size_t n = static_cast<size_t>(N) * C;
    const auto x = randn(n, 2.f), w = randn(C), dout = randn(n), dinp0 = randn(n), dw0 = randn(C);
    std::vector<float> out(n), rstd(N), dinp = dinp0, dw = dw0;
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    auto d_x = up(x), d_w = up(w), d_dout = up(dout);
    const Outputs got = twice([&] {
      auto o = poisoned<float>(n), r = poisoned<float>(N);
      auto di = up(dinp0), dww = up(dw0);
      cuda::rmsnorm_forward(o.data(), r.data(), d_x.data(), d_w.data(), N, C, eps, {});
      cuda::rmsnorm_backward(di.data(), dww.data(), d_dout.data(), d_x.data(), d_w.data(), r.data(), N, C, {});
      return Outputs{down(o), down(r), down(di), down(dww)};
    });
    std::string sh = dims(" ", N, C);
    sh += eps == 1e-5f ? " eps 1e-5" : " eps 1e-6";
    expect_close("rmsnorm out" + sh, got[0], out, 1e-5);
    expect_close("rmsnorm rstd" + sh, got[1], rstd, 1e-5);
    expect_close("rmsnorm dinp (accumulated)" + sh, got[2], dinp, 1e-5);
    expect_close("rmsnorm dweight (accumulated)" + sh, got[3], dw, 1e-5);
  }
}

TEST_F(CudaKernels, SwigluMatchesCpu) {
  for (const auto& [N, F] : std::vector<std::pair<int, int>>{{4096, 2048}, {37, 129}, {1, 1}}) {
    const size_t n = static_cast<size_t>(N) * F;
    auto pre = randn(2 * n, 2.f);
    // Saturated and capped sigmoids (the CPU caps exp's argument at 80), and a zero gate.
    const float specials[] = {-100.f, -88.f, -80.f, -20.f, 0.f, 20.f, 100.f};
    for (size_t i = 0; i < std::size(specials) && i * 97 < pre.size(); ++i) pre[i * 97] = specials[i];
    const auto dout = randn(n);
    std::vector<float> out(n), dpre(2 * n);
    std::vector<bf16_t> out16(n);
    swiglu_forward(out.data(), pre.data(), N, F);
    swiglu_forward_bf16(out16.data(), pre.data(), N, F);
    swiglu_backward(dpre.data(), dout.data(), pre.data(), N, F);
    auto d_pre = up(pre), d_dout = up(dout);
    const Outputs got = twice([&] {
      auto o = poisoned<float>(n), dp = poisoned<float>(2 * n);
      auto o16 = poisoned<bf16_t>(n);
      cuda::swiglu_forward(o.data(), d_pre.data(), N, F, {});
      cuda::swiglu_forward_bf16(o16.data(), d_pre.data(), N, F, {});
      cuda::swiglu_backward(dp.data(), d_dout.data(), d_pre.data(), N, F, {});
      return Outputs{down(o), down(o16), down(dp)};
    });
    const std::string sh = dims(" ", N, F);
    expect_close("swiglu out" + sh, got[0], out, 1e-5);
    expect_close("swiglu out bf16" + sh, got[1], widen(out16), 1e-2);
    expect_bits("swiglu out bf16 = fp32 out rounded" + sh, got[1], widen(to_bf16(got[0])));
    expect_close("swiglu dpre" + sh, got[2], dpre, 1e-5);
  }
}

TEST_F(CudaKernels, RopeMatchesCpuBitForBit) {
  struct Case {
    int T, NH, NKV, HS, rows, lo, hi;
    double theta;
  };
  for (const Case& c : {Case{1024, 8, 8, 64, 4096, 0, 4096, 1e4}, Case{1024, 8, 2, 128, 2048, 100, 2048, 5e5},
                        Case{37, 8, 1, 8, 111, 5, 100, 1e4}, Case{7, 3, 3, 2, 14, 0, 14, 1e4}}) {
    const int H = c.HS / 2;
    const size_t width = static_cast<size_t>(c.NH + 2 * c.NKV) * c.HS, n = width * c.rows;
    std::vector<float> cs(static_cast<size_t>(c.T) * H), sn(cs.size());
    rope_table(cs.data(), sn.data(), c.T, c.HS, c.theta);
    const auto x = randn(n);
    // The CPU's result: rows outside [lo, hi) and the value heads keep their bits.
    std::vector<float> fwd = x, bwd = x;
    rope_forward(fwd.data(), cs.data(), sn.data(), c.lo, c.hi, c.T, c.NH, c.NKV, c.HS);
    rope_backward(bwd.data(), cs.data(), sn.data(), c.lo, c.hi, c.T, c.NH, c.NKV, c.HS);
    auto d_cos = up(cs), d_sin = up(sn);
    const Outputs got = twice([&] {
      auto f = up(x), b = up(x);
      cuda::rope_forward(f.data(), d_cos.data(), d_sin.data(), c.lo, c.hi, c.T, c.NH, c.NKV, c.HS, {});
      cuda::rope_backward(b.data(), d_cos.data(), d_sin.data(), c.lo, c.hi, c.T, c.NH, c.NKV, c.HS, {});
      return Outputs{down(f), down(b)};
    });
    std::string sh = " T" + std::to_string(c.T);
    sh += " NH" + std::to_string(c.NH);
    sh += " NKV" + std::to_string(c.NKV);
    sh += " HS" + std::to_string(c.HS);
    sh += dims(" rows ", c.lo, c.hi);
    expect_bits("rope forward" + sh, got[0], fwd);
    expect_bits("rope backward" + sh, got[1], bwd);
  }
}

// ---- grouped-query attention ----

struct GqaShape {
  int B, T, NH, HS, W;
};
// T = 200: three full 64-row tiles and a partial one; a sliding window; a window >= T.
const std::vector<GqaShape> kGqaShapes = {{2, 200, 8, 32, 0}, {1, 200, 8, 64, 50}, {2, 200, 8, 16, 300}};

std::string gqa_name(const char* what, bool bf16, const GqaShape& s, int NKV) {
  std::string n = bf16 ? "gqa bf16 " : "gqa fp32 ";
  n += what;
  n += " B" + std::to_string(s.B);
  n += " T" + std::to_string(s.T);
  n += " NH" + std::to_string(s.NH);
  n += " NKV" + std::to_string(NKV);
  n += " HS" + std::to_string(s.HS);
  n += " W" + std::to_string(s.W);
  return n;
}

struct Attn {
  std::vector<float> out, lse, dqkv;
};

// Naive causal / sliding-window attention in double on the packed layout (rows (NH + 2 NKV) HS wide,
// query head h reading kv head h / (NH/NKV)): out (B,T,NH*HS), lse (B,NH,T), and dqkv with each kv
// head's dK / dV summed over its query heads; rounded to float at the end.
Attn reference_attention(const std::vector<float>& qkv, const std::vector<float>& dout, const GqaShape& s, int NKV) {
  const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, G = NH / NKV;
  const size_t Wd = static_cast<size_t>(NH + 2 * NKV) * HS, C = static_cast<size_t>(NH) * HS;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> out(B * T * C), lse(static_cast<size_t>(B) * NH * T), dqkv(B * T * Wd, 0.0);
  std::vector<double> p(T), dp(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const size_t qo = static_cast<size_t>(h) * HS, ko = (NH + h / G) * static_cast<size_t>(HS),
                   vo = ko + static_cast<size_t>(NKV) * HS;
      const auto at = [&](int t, size_t off, int d) { return (static_cast<size_t>(b) * T + t) * Wd + off + d; };
      for (int i = 0; i < T; ++i) {
        const int j0 = s.W > 0 ? std::max(0, i - s.W + 1) : 0;
        double mx = -std::numeric_limits<double>::infinity(), l = 0, D = 0;
        for (int j = j0; j <= i; ++j) {
          double sc = 0;
          for (int d = 0; d < HS; ++d) sc += static_cast<double>(qkv[at(i, qo, d)]) * qkv[at(j, ko, d)];
          p[j] = sc * scale;
          mx = std::max(mx, p[j]);
        }
        for (int j = j0; j <= i; ++j) l += (p[j] = std::exp(p[j] - mx));
        lse[(static_cast<size_t>(b) * NH + h) * T + i] = mx + std::log(l);
        const size_t orow = (static_cast<size_t>(b) * T + i) * C + qo;
        for (int j = j0; j <= i; ++j) {
          p[j] /= l;
          dp[j] = 0;
          for (int d = 0; d < HS; ++d) {
            out[orow + d] += p[j] * qkv[at(j, vo, d)];
            dp[j] += static_cast<double>(dout[orow + d]) * qkv[at(j, vo, d)];
          }
          D += p[j] * dp[j];
        }
        for (int j = j0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - D) * scale;
          for (int d = 0; d < HS; ++d) {
            dqkv[at(i, qo, d)] += ds * qkv[at(j, ko, d)];
            dqkv[at(j, ko, d)] += ds * qkv[at(i, qo, d)];
            dqkv[at(j, vo, d)] += p[j] * dout[orow + d];
          }
        }
      }
    }
  const auto f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  return {f(out), f(lse), f(dqkv)};
}

// The packed rows with every kv head copied to its query heads: multi-head rows (3C wide).
std::vector<float> expand_kv(const std::vector<float>& qkv, size_t rows, int NH, int NKV, int HS) {
  const size_t Wd = static_cast<size_t>(NH + 2 * NKV) * HS, C = static_cast<size_t>(NH) * HS;
  std::vector<float> e(rows * 3 * C);
  for (size_t r = 0; r < rows; ++r)
    for (int h = 0; h < NH; ++h) {
      const size_t kv = static_cast<size_t>(h / (NH / NKV));
      for (int d = 0; d < HS; ++d) {
        e[r * 3 * C + h * HS + d] = qkv[r * Wd + h * HS + d];
        e[r * 3 * C + C + h * HS + d] = qkv[r * Wd + (NH + kv) * HS + d];
        e[r * 3 * C + 2 * C + h * HS + d] = qkv[r * Wd + (NH + NKV + kv) * HS + d];
      }
    }
  return e;
}

// expand_kv's transpose on a gradient: dQ as it is, each kv head's dK / dV the sum (in double, in
// head order) of its query heads' copies.
std::vector<float> fold_kv(const std::vector<float>& de, size_t rows, int NH, int NKV, int HS) {
  const size_t Wd = static_cast<size_t>(NH + 2 * NKV) * HS, C = static_cast<size_t>(NH) * HS;
  const int G = NH / NKV;
  std::vector<float> g(rows * Wd);
  for (size_t r = 0; r < rows; ++r) {
    const float* e = de.data() + r * 3 * C;
    float* o = g.data() + r * Wd;
    std::copy(e, e + C, o);
    for (int kv = 0; kv < NKV; ++kv)
      for (int d = 0; d < HS; ++d) {
        double k = 0, v = 0;
        for (int h = kv * G; h < (kv + 1) * G; ++h) {
          k += e[C + h * HS + d];
          v += e[2 * C + h * HS + d];
        }
        o[(NH + kv) * HS + d] = static_cast<float>(k);
        o[(NH + NKV + kv) * HS + d] = static_cast<float>(v);
      }
  }
  return g;
}

// The columns [c0, c1) of every row of width w.
std::vector<float> columns(const std::vector<float>& x, size_t w, size_t c0, size_t c1) {
  std::vector<float> o;
  for (size_t r = 0; r < x.size() / w; ++r) o.insert(o.end(), x.begin() + r * w + c0, x.begin() + r * w + c1);
  return o;
}

void check_gqa_attention(bool bf16) {
  const double tol = bf16 ? 1e-2 : 1e-5;
  const auto fwd = bf16 ? cuda::attention_forward_bf16 : cuda::attention_forward;
  const auto bwd = bf16 ? cuda::attention_backward_bf16 : cuda::attention_backward;
  for (const GqaShape& s : kGqaShapes)
    for (const int NKV : {8, 4, 2, 1}) {
      const int C = s.NH * s.HS;
      const size_t rows = static_cast<size_t>(s.B) * s.T, Wd = static_cast<size_t>(s.NH + 2 * NKV) * s.HS;
      const size_t nq = rows * Wd, no = rows * C, nl = static_cast<size_t>(s.B) * s.NH * s.T;
      const auto qkv = randn(nq), dout = randn(no);
      // bf16: the reference on the operands the kernels round (Q, K, V, dout), in double.
      const Attn ref = bf16 ? reference_attention(widen(to_bf16(qkv)), widen(to_bf16(dout)), s, NKV)
                            : reference_attention(qkv, dout, s, NKV);
      // The backward takes the reference's out and lse: each direction is checked on its own.
      auto d_qkv = up(qkv), d_dout = up(dout), d_rout = up(ref.out), d_rlse = up(ref.lse);
      const auto run = [&](const DeviceBuffer<float>& in, int nkv, int W, size_t n_in) {
        return twice([&] {
          auto out = poisoned<float>(no), lse = poisoned<float>(nl), dqkv = poisoned<float>(n_in);
          fwd(out.data(), lse.data(), in.data(), s.B, s.T, C, s.NH, nkv, W, {});
          bwd(dqkv.data(), d_dout.data(), in.data(), d_rout.data(), d_rlse.data(), s.B, s.T, C, s.NH, nkv, W, {});
          return Outputs{down(out), down(lse), down(dqkv)};
        });
      };
      const Outputs got = run(d_qkv, NKV, s.W, nq);
      expect_close(gqa_name("out vs double", bf16, s, NKV), got[0], ref.out, tol);
      expect_close(gqa_name("lse vs double", bf16, s, NKV), got[1], ref.lse, tol);
      expect_close(gqa_name("dqkv vs double", bf16, s, NKV), got[2], ref.dqkv, tol);
      if (s.W >= s.T) {  // a window as long as the sequence is full causal attention
        const Outputs full = run(d_qkv, NKV, 0, nq);
        for (size_t k = 0; k < full.size(); ++k) expect_bits(gqa_name("W>=T vs W=0", bf16, s, NKV), got[k], full[k]);
      }
      // Multi-head attention on the GPU with the kv heads copied: the same operands in the same order.
      auto d_exp = up(expand_kv(qkv, rows, s.NH, NKV, s.HS));
      const Outputs mha = run(d_exp, s.NH, s.W, rows * 3 * C);
      const std::vector<float> folded = fold_kv(mha[2], rows, s.NH, NKV, s.HS);
      expect_bits(gqa_name("out vs copied-kv MHA", bf16, s, NKV), got[0], mha[0]);
      expect_bits(gqa_name("lse vs copied-kv MHA", bf16, s, NKV), got[1], mha[1]);
      expect_bits(gqa_name("dQ vs copied-kv MHA", bf16, s, NKV), columns(got[2], Wd, 0, C),
                  columns(folded, Wd, 0, C));
      if (NKV == s.NH) {  // nothing to fold: the same kernels' bits
        expect_bits(gqa_name("dK dV vs MHA", bf16, s, NKV), got[2], folded);
      } else {
        expect_close(gqa_name("dK dV vs copied-kv MHA summed", bf16, s, NKV), columns(got[2], Wd, C, Wd),
                     columns(folded, Wd, C, Wd), 1e-5);
      }
      // The CPU backend on the same inputs (its backward on the same out and lse), every NKV.
      {
        KernelBackend& cpu = cpu_kernels();
        std::vector<float> cout(no), clse(nl), cdqkv(nq);
        cpu.attention_forward(bf16, cout.data(), clse.data(), qkv.data(), s.B, s.T, C, s.NH, NKV, s.W);
        cpu.attention_backward(bf16, cdqkv.data(), dout.data(), qkv.data(), ref.out.data(), ref.lse.data(), s.B,
                               s.T, C, s.NH, NKV, s.W);
        expect_close(gqa_name("out vs CPU", bf16, s, NKV), got[0], cout, tol);
        expect_close(gqa_name("lse vs CPU", bf16, s, NKV), got[1], clse, tol);
        expect_close(gqa_name("dqkv vs CPU", bf16, s, NKV), got[2], cdqkv, tol);
      }
    }
}

TEST_F(CudaKernels, GroupedQueryAttentionFp32MatchesReference) { check_gqa_attention(false); }
TEST_F(CudaKernels, GroupedQueryAttentionBf16MatchesReference) { check_gqa_attention(true); }

// One Llama-style block's kernels through the CUDA KernelBackend: the second pass allocates nothing.
TEST_F(CudaKernels, LlamaKernelsThroughTheBackendAllocateNothingAfterWarmUp) {
  KernelBackend& k = cuda_kernels();
  const int B = 2, T = 128, N = B * T, NH = 8, NKV = 2, HS = 64, C = NH * HS, F = 1024;
  const size_t nc = static_cast<size_t>(N) * C, nf = static_cast<size_t>(N) * F;
  const size_t nqkv = static_cast<size_t>(N) * (NH + 2 * NKV) * HS, nt = static_cast<size_t>(T) * HS / 2;
  std::vector<float> cs(nt), sn(nt);
  rope_table(cs.data(), sn.data(), T, HS, 1e4);
  auto x = up(randn(nc)), w = up(randn(C)), dy = up(randn(nc)), pre = up(randn(2 * nf)), dact = up(randn(nf));
  auto qkv = up(randn(nqkv)), d_cos = up(cs), d_sin = up(sn);
  DeviceBuffer<float> y(nc), rstd(N), dx(nc), dw(C), act(nf), dpre(2 * nf), att(nc), dqkv(nqkv);
  DeviceBuffer<float> lse(static_cast<size_t>(B) * NH * T);
  DeviceBuffer<bf16_t> act16(nf);
  const auto pass = [&] {
    k.rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
    k.rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    k.swiglu_forward(act.data(), pre.data(), N, F);
    k.swiglu_forward_bf16(act16.data(), pre.data(), N, F);
    k.swiglu_backward(dpre.data(), dact.data(), pre.data(), N, F);
    k.rope_forward(qkv.data(), d_cos.data(), d_sin.data(), 0, N, T, NH, NKV, HS);
    for (const bool bf16 : {false, true})
      for (const int W : {0, 32}) {
        k.attention_forward(bf16, att.data(), lse.data(), qkv.data(), B, T, C, NH, NKV, W);
        k.attention_backward(bf16, dqkv.data(), dy.data(), qkv.data(), att.data(), lse.data(), B, T, C, NH, NKV, W);
      }
    k.rope_backward(dqkv.data(), d_cos.data(), d_sin.data(), 0, N, T, NH, NKV, HS);
    stream_sync(k.stream());
  };
  pass();
  const size_t allocs = device_allocations();
  pass();
  EXPECT_EQ(device_allocations(), allocs) << "device allocations after the warm-up pass";
}

}  // namespace
}  // namespace ms
