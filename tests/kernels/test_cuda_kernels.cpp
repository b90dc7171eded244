// test_cuda_kernels (label gpu): every CUDA kernel of kernels/cuda_kernels.h against its CPU
// kernel, the oracle, on fresh random inputs (a new seed every run, printed), at GPT-2 shapes
// (N up to 4096 rows, C = 768, 3C, 4C, Vp = 50304) and odd shapes (N, C not multiples of a tile).
// Outputs are poisoned with NaN before each run and every element must be written (finite where
// the CPU's is); relative L2 <= 1e-5 for fp32 kernels and <= 1e-2 for bf16 operands (the bf16
// GEMMs land far below: bf16 x bf16 products are exact in fp32 on both sides); each kernel runs
// twice on the same inputs and must give the same bits. Exact-by-construction kernels (bf16
// conversion, embedding) must match the CPU bit for bit. Attention (fp32 and bf16 operands) at GPT-2
// shapes (T = 1024, HS = 64), full and sliding (W = 256; W >= T must give full's bits) and odd
// shapes (T = 1, T not a multiple of the 64-row tile, HS = 8, 24, 128). Skips where no CUDA device opens (CI).
// One binary with test_cuda_kernels/*.cpp (the Llama-style kernels: RMSNorm, SwiGLU, RoPE, grouped-query
// attention); the helpers they share are cuda_test_util.h's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "base/bf16.h"
#include "base/check.h"  // Error
#include "base/device.h"
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/bf16_convert.h"
#include "kernels/cross_entropy.h"
#include "kernels/cuda_kernels.h"
#include "kernels/cuda_test_util.h"  // tests/kernels/: the fixture and helpers
#include "kernels/gelu.h"
#include "kernels/gemm_bf16.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/optim_kernels.h"
#include "kernels/vocab_parallel_cross_entropy.h"
#include "optim/adamw.h"
#include "optim/grad_norm.h"
#include "optim/lamb.h"

namespace ms {
namespace {

using namespace cuda_test;  // the shared helpers (cuda_test_util.h)

struct Shape {
  int N, C, OC;
};
// GPT-2 124M's linear layers at 4096 rows (the LM head at 1024), and odd shapes.
const std::vector<Shape> kGemmShapes = {{4096, 768, 2304}, {4096, 768, 768}, {4096, 768, 3072},
                                        {4096, 3072, 768}, {1024, 768, 50304}, {37, 129, 65}, {3, 5, 1}};
std::string name(const char* op, const Shape& s) {
  return std::string(op) + " " + std::to_string(s.N) + "x" + std::to_string(s.C) + "->" + std::to_string(s.OC);
}

TEST_F(CudaKernels, MatmulFp32MatchesCpu) {
  for (const Shape& s : kGemmShapes) {
    const size_t nin = static_cast<size_t>(s.N) * s.C, nout = static_cast<size_t>(s.N) * s.OC;
    const size_t nw = static_cast<size_t>(s.OC) * s.C;
    const auto inp = randn(nin), w = randn(nw, 0.05f), b = randn(s.OC), dout = randn(nout);
    const auto out0 = randn(nout), dw0 = randn(nw), db0 = randn(s.OC), dinp0 = randn(nin);
    auto d_inp = up(inp), d_w = up(w), d_b = up(b), d_dout = up(dout);
    // forward: with bias; accumulating, without bias
    std::vector<float> ref1(nout), ref2 = out0;
    matmul_forward(ref1.data(), inp.data(), w.data(), b.data(), s.N, s.C, s.OC, false);
    matmul_forward(ref2.data(), inp.data(), w.data(), nullptr, s.N, s.C, s.OC, true);
    Outputs got = twice([&] {
      auto o1 = poisoned<float>(nout);
      auto o2 = up(out0);
      cuda::matmul_forward(o1.data(), d_inp.data(), d_w.data(), d_b.data(), s.N, s.C, s.OC, false, {});
      cuda::matmul_forward(o2.data(), d_inp.data(), d_w.data(), nullptr, s.N, s.C, s.OC, true, {});
      return Outputs{down(o1), down(o2)};
    });
    expect_close(name("fp32 fwd", s), got[0], ref1, 1e-5);
    expect_close(name("fp32 fwd acc", s), got[1], ref2, 1e-5);
    // backward: dinp overwritten, dweight and dbias accumulated
    std::vector<float> rdinp(nin), rdw = dw0, rdb = db0;
    matmul_backward(rdinp.data(), rdw.data(), rdb.data(), dout.data(), inp.data(), w.data(), s.N, s.C, s.OC, false);
    got = twice([&] {
      auto dinp = poisoned<float>(nin);
      auto dw = up(dw0), db = up(db0);
      cuda::matmul_backward(dinp.data(), dw.data(), db.data(), d_dout.data(), d_inp.data(), d_w.data(), s.N, s.C,
                            s.OC, false, {});
      return Outputs{down(dinp), down(dw), down(db)};
    });
    expect_close(name("fp32 bwd dinp", s), got[0], rdinp, 1e-5);
    expect_close(name("fp32 bwd dweight", s), got[1], rdw, 1e-5);
    expect_close(name("fp32 bwd dbias", s), got[2], rdb, 1e-5);
  }
}

TEST_F(CudaKernels, MatmulBf16MatchesCpu) {
  for (const Shape& s : kGemmShapes) {
    const size_t nin = static_cast<size_t>(s.N) * s.C, nout = static_cast<size_t>(s.N) * s.OC;
    const size_t nw = static_cast<size_t>(s.OC) * s.C;
    const auto inp = to_bf16(randn(nin)), w = to_bf16(randn(nw, 0.05f));
    const auto b = randn(s.OC), dout = randn(nout), dw0 = randn(nw), db0 = randn(s.OC), dinp0 = randn(nin);
    auto d_inp = up(inp), d_w = up(w);
    auto d_b = up(b), d_dout = up(dout);
    std::vector<float> ref(nout);
    matmul_forward_bf16(ref.data(), inp.data(), w.data(), b.data(), s.N, s.C, s.OC, false);
    Outputs got = twice([&] {
      auto o = poisoned<float>(nout);
      cuda::matmul_forward_bf16(o.data(), d_inp.data(), d_w.data(), d_b.data(), s.N, s.C, s.OC, false, {});
      return Outputs{down(o)};
    });
    expect_close(name("bf16 fwd", s), got[0], ref, 1e-2);
    // backward from fp32 dout (dinp accumulated here), then from the bf16 dout
    std::vector<float> rdinp = dinp0, rdw = dw0, rdb = db0;
    std::vector<bf16_t> rdout_bf16(nout);
    matmul_backward_bf16(rdinp.data(), rdw.data(), rdb.data(), dout.data(), rdout_bf16.data(), inp.data(),
                         w.data(), s.N, s.C, s.OC, true);
    got = twice([&] {
      auto dinp = up(dinp0), dw = up(dw0), db = up(db0);
      auto dout_bf16 = poisoned<bf16_t>(nout);
      cuda::matmul_backward_bf16(dinp.data(), dw.data(), db.data(), d_dout.data(), dout_bf16.data(), d_inp.data(),
                                 d_w.data(), s.N, s.C, s.OC, true, {});
      return Outputs{down(dinp), down(dw), down(db), down(dout_bf16)};
    });
    expect_close(name("bf16 bwd dinp", s), got[0], rdinp, 1e-2);
    expect_close(name("bf16 bwd dweight", s), got[1], rdw, 1e-2);
    expect_close(name("bf16 bwd dbias", s), got[2], rdb, 1e-5);
    expect_bits(name("bf16 bwd dout_bf16", s), got[3], widen(rdout_bf16));
    std::vector<float> rdinp2(nin), rdw2 = dw0;
    matmul_backward_bf16_from_bf16(rdinp2.data(), rdw2.data(), rdout_bf16.data(), inp.data(), w.data(), s.N, s.C,
                                   s.OC, false);
    auto d_dout_bf16 = up(rdout_bf16);
    got = twice([&] {
      auto dinp = poisoned<float>(nin);
      auto dw = up(dw0);
      cuda::matmul_backward_bf16_from_bf16(dinp.data(), dw.data(), d_dout_bf16.data(), d_inp.data(), d_w.data(),
                                           s.N, s.C, s.OC, false, {});
      return Outputs{down(dinp), down(dw)};
    });
    expect_close(name("bf16 bwd(bf16) dinp", s), got[0], rdinp2, 1e-2);
    expect_close(name("bf16 bwd(bf16) dweight", s), got[1], rdw2, 1e-2);
  }
  const int plans = cuda::gemm_cached_plans();
  const size_t allocs = device_allocations();
  {  // warm: the same shapes again create no plan (no allocation, beyond the test's own buffers)
    const Shape s = kGemmShapes[0];
    auto a = up(to_bf16(randn(static_cast<size_t>(s.N) * s.C)));
    auto w = up(to_bf16(randn(static_cast<size_t>(s.OC) * s.C)));
    DeviceBuffer<float> o(static_cast<size_t>(s.N) * s.OC);
    cuda::matmul_forward_bf16(o.data(), a.data(), w.data(), nullptr, s.N, s.C, s.OC, false, {});
    stream_sync({});
  }
  EXPECT_EQ(cuda::gemm_cached_plans(), plans + 1) << "one new plan: no bias, where the loop above had one";
  EXPECT_EQ(device_allocations(), allocs + 3) << "only the three buffers of this block";
}

TEST_F(CudaKernels, LayerNormMatchesCpu) {
  // eps: GPT-2's 1e-5, and 1e-6 (Llama-style models' model.norm_eps)
  for (const auto& [N, C, eps] : std::vector<std::tuple<int, int, float>>{
           {4096, 768, 1e-5f}, {4096, 768, 1e-6f}, {37, 770, 1e-6f}, {1, 3, 1e-5f}}) {
    const size_t n = static_cast<size_t>(N) * C;
    const auto x = randn(n, 2.f), w = randn(C), b = randn(C), dout = randn(n);
    const auto dinp0 = randn(n), dw0 = randn(C), db0 = randn(C);
    std::vector<float> out(n), mean(N), rstd(N), dinp = dinp0, dw = dw0, db = db0;
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, eps);
    layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    auto d_x = up(x), d_w = up(w), d_b = up(b), d_dout = up(dout);
    const Outputs got = twice([&] {
      auto o = poisoned<float>(n), m = poisoned<float>(N), r = poisoned<float>(N);
      auto di = up(dinp0), dww = up(dw0), dbb = up(db0);
      cuda::layernorm_forward(o.data(), m.data(), r.data(), d_x.data(), d_w.data(), d_b.data(), N, C, eps, {});
      cuda::layernorm_backward(di.data(), dww.data(), dbb.data(), d_dout.data(), d_x.data(), d_w.data(), m.data(),
                               r.data(), N, C, {});
      return Outputs{down(o), down(m), down(r), down(di), down(dww), down(dbb)};
    });
    std::string sh = dims(" ", N, C);
    sh += eps == 1e-5f ? " eps 1e-5" : " eps 1e-6";
    expect_close("layernorm out" + sh, got[0], out, 1e-5);
    expect_close("layernorm mean" + sh, got[1], mean, 1e-5);
    expect_close("layernorm rstd" + sh, got[2], rstd, 1e-5);
    expect_close("layernorm dinp" + sh, got[3], dinp, 1e-5);
    expect_close("layernorm dweight" + sh, got[4], dw, 1e-5);
    expect_close("layernorm dbias" + sh, got[5], db, 1e-5);
  }
}

TEST_F(CudaKernels, GeluMatchesCpu) {
  for (const auto& [N, C] : std::vector<std::pair<int, int>>{{4096, 3072}, {37, 129}}) {
    const size_t n = static_cast<size_t>(N) * C;
    const auto pre0 = randn(n, 2.f), bias = randn(C), dout = randn(n), db0 = randn(C);
    std::vector<float> pre = pre0, out(n), pre2 = pre0, dpre(n), db = db0;
    std::vector<bf16_t> out16(n);
    bias_gelu_forward(out.data(), pre.data(), bias.data(), N, C);
    bias_gelu_forward_bf16(out16.data(), pre2.data(), bias.data(), N, C);
    bias_gelu_backward(dpre.data(), db.data(), dout.data(), pre.data(), N, C);
    auto d_bias = up(bias), d_dout = up(dout), d_pre_after = up(pre);
    const Outputs got = twice([&] {
      auto p = up(pre0), p2 = up(pre0), o = poisoned<float>(n), dp = poisoned<float>(n), dbb = up(db0);
      auto o16 = poisoned<bf16_t>(n);
      cuda::bias_gelu_forward(o.data(), p.data(), d_bias.data(), N, C, {});
      cuda::bias_gelu_forward_bf16(o16.data(), p2.data(), d_bias.data(), N, C, {});
      cuda::bias_gelu_backward(dp.data(), dbb.data(), d_dout.data(), d_pre_after.data(), N, C, {});
      return Outputs{down(o), down(p), down(o16), down(dp), down(dbb)};
    });
    const std::string sh = dims(" ", N, C);
    expect_close("gelu out" + sh, got[0], out, 1e-5);
    expect_bits("gelu pre += bias" + sh, got[1], pre);
    expect_close("gelu out bf16" + sh, got[2], widen(out16), 1e-2);
    expect_close("gelu dpre" + sh, got[3], dpre, 1e-5);
    expect_close("gelu dbias" + sh, got[4], db, 1e-5);
  }
}

TEST_F(CudaKernels, SoftmaxCrossEntropyMatchesCpu) {
  struct Case {
    int N, V, Vp;
  };
  for (const Case& c : {Case{1024, 50257, 50304}, Case{37, 1000, 1024}}) {
    const size_t n = static_cast<size_t>(c.N) * c.Vp;
    const auto logits = randn(n, 3.f);
    auto targets = rand_ids(c.N, 0, c.V);
    for (int i = 0; i < c.N; i += 7) targets[i] = -1;  // ignored rows
    const float dloss = 1.f / c.N;
    std::vector<float> loss(c.N), dl(n), loss16(c.N);
    std::vector<bf16_t> dl16(n);
    softmax_cross_entropy_forward_backward(loss.data(), dl.data(), logits.data(), targets.data(), c.N, c.V, c.Vp, dloss);
    softmax_cross_entropy_forward_backward_bf16(loss16.data(), dl16.data(), logits.data(), targets.data(), c.N, c.V,
                                                c.Vp, dloss);
    auto d_logits = up(logits);
    auto d_t = up(targets);
    const Outputs got = twice([&] {
      auto l = poisoned<float>(c.N), d = poisoned<float>(n), l16 = poisoned<float>(c.N);
      auto d16 = poisoned<bf16_t>(n);
      auto inplace = up(logits);
      auto l2 = poisoned<float>(c.N);
      cuda::softmax_cross_entropy_forward_backward(l.data(), d.data(), d_logits.data(), d_t.data(), c.N, c.V, c.Vp,
                                                   dloss, {});
      cuda::softmax_cross_entropy_forward_backward_bf16(l16.data(), d16.data(), d_logits.data(), d_t.data(), c.N,
                                                        c.V, c.Vp, dloss, {});
      cuda::softmax_cross_entropy_forward_backward(l2.data(), inplace.data(), inplace.data(), d_t.data(), c.N, c.V,
                                                   c.Vp, dloss, {});
      return Outputs{down(l), down(d), down(l16), down(d16), down(l2), down(inplace)};
    });
    const std::string sh = dims(" ", c.N, c.Vp);
    expect_close("ce losses" + sh, got[0], loss, 1e-5);
    expect_close("ce dlogits" + sh, got[1], dl, 1e-5);
    expect_close("ce losses (bf16 grad)" + sh, got[2], loss16, 1e-5);
    expect_close("ce dlogits bf16" + sh, got[3], widen(dl16), 1e-2);
    expect_close("ce losses in place" + sh, got[4], loss, 1e-5);
    expect_close("ce dlogits in place" + sh, got[5], dl, 1e-5);
  }
}

TEST_F(CudaKernels, Bf16ConversionIsExact) {
  const size_t n = static_cast<size_t>(4096) * 768 + 3;
  auto x = randn(n, 10.f);
  const float specials[] = {0.f, -0.f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-39f, 1.00390625f, 1.01171875f, 3.4e38f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(float); ++i) x[i * 997] = specials[i];
  const auto ref16 = to_bf16(x);
  std::vector<float> back(n);
  bf16_to_f32(back.data(), ref16.data(), n);
  auto d_x = up(x);
  auto d_16 = up(ref16);
  const Outputs got = twice([&] {
    auto o16 = poisoned<bf16_t>(n);
    auto o32 = poisoned<float>(n);
    cuda::f32_to_bf16(o16.data(), d_x.data(), n, {});
    cuda::bf16_to_f32(o32.data(), d_16.data(), n, {});
    return Outputs{down(o16), down(o32)};
  });
  expect_bits("f32_to_bf16", got[0], widen(ref16));
  expect_bits("bf16_to_f32", got[1], back);
}

TEST_F(CudaKernels, AdamWMatchesCpu) {
  const size_t n = (size_t{1} << 20) + 7;
  for (const bool decay : {true, false}) {
    const auto p0 = randn(n), g0 = randn(n, 0.1f), m0 = randn(n, 0.01f);
    auto v0 = randn(n, 0.01f);
    for (float& v : v0) v = v * v;
    const int t = decay ? 3 : 1;
    const float lr = 6e-4f, scale = decay ? 0.7f : 1.f;
    AdamHyper h;
    std::vector<float> p = p0, g = g0, m = m0, v = v0;
    std::vector<bf16_t> pb(n);
    adamw_update(p.data(), g.data(), m.data(), v.data(), {ParamTensor{"w", 0, n, decay}}, lr, t, h, scale,
                 decay ? pb.data() : nullptr, decay);
    const Outputs got = twice([&] {
      auto dp = up(p0), dg = up(g0), dm = up(m0), dv = up(v0);
      auto dpb = poisoned<bf16_t>(n);
      cuda::adamw_update(dp.data(), dg.data(), dm.data(), dv.data(), n, decay, lr, t, h.beta1, h.beta2, h.eps,
                         h.weight_decay, scale, decay ? dpb.data() : nullptr, decay, {});
      return Outputs{down(dp), down(dg), down(dm), down(dv), down(dpb)};
    });
    const std::string sh = decay ? " (decay, scaled, bf16 copy, zero grads)" : " (no decay)";
    expect_close("adamw params" + sh, got[0], p, 1e-5);
    expect_bits("adamw grads" + sh, got[1], g);
    expect_close("adamw m" + sh, got[2], m, 1e-5);
    expect_close("adamw v" + sh, got[3], v, 1e-5);
    if (decay) expect_close("adamw bf16 copy" + sh, got[4], widen(pb), 1e-2);
  }
}

TEST_F(CudaKernels, EmbeddingMatchesCpuBitForBit) {
  struct Case {
    int B, T, C, V;
  };
  for (const Case& c : {Case{4, 1024, 768, 50304}, Case{3, 37, 129, 7}}) {
    const int N = c.B * c.T;
    const size_t n = static_cast<size_t>(N) * c.C;
    const auto ids = rand_ids(N, 0, c.V);
    const auto wte = randn(static_cast<size_t>(c.V) * c.C), wpe = randn(static_cast<size_t>(c.T) * c.C);
    const auto dout = randn(n), dwte0 = randn(wte.size()), dwpe0 = randn(wpe.size());
    // The CPU model's loops (model/gpt_forward.cpp, gpt_backward.cpp), rows in ascending order.
    std::vector<float> out(n), dwte = dwte0, dwpe = dwpe0;
    for (int i = 0; i < N; ++i)
      for (int k = 0; k < c.C; ++k)
        out[static_cast<size_t>(i) * c.C + k] = wte[static_cast<size_t>(ids[i]) * c.C + k] + wpe[static_cast<size_t>(i % c.T) * c.C + k];
    for (int i = 0; i < N; ++i)
      for (int k = 0; k < c.C; ++k) {
        dwpe[static_cast<size_t>(i % c.T) * c.C + k] += dout[static_cast<size_t>(i) * c.C + k];
        dwte[static_cast<size_t>(ids[i]) * c.C + k] += dout[static_cast<size_t>(i) * c.C + k];
      }
    auto d_ids = up(ids);
    auto d_wte = up(wte), d_wpe = up(wpe), d_dout = up(dout);
    const Outputs got = twice([&] {
      auto o = poisoned<float>(n);
      auto dte = up(dwte0), dpe = up(dwpe0);
      cuda::embedding_forward(o.data(), d_ids.data(), d_wte.data(), d_wpe.data(), c.B, c.T, c.C, c.V, {});
      cuda::embedding_backward(dte.data(), dpe.data(), d_dout.data(), d_ids.data(), c.B, c.T, c.C, c.V, {});
      return Outputs{down(o), down(dte), down(dpe)};
    });
    std::string sh = " B";
    sh += std::to_string(c.B);
    sh += " T";
    sh += std::to_string(c.T);
    sh += " V";
    sh += std::to_string(c.V);
    expect_bits("embedding out" + sh, got[0], out);
    expect_bits("embedding dwte" + sh, got[1], dwte);
    expect_bits("embedding dwpe" + sh, got[2], dwpe);
  }
}

// vocab_parallel_cross_entropy.h's three phases on every part of a split vocabulary, with the
// ranks' reductions (max, then sum) done on the host between them, as the caller does.
void check_vocab_shards(int N, int V, int Vl, int parts) {
  auto targets = rand_ids(N, 0, V);
  for (int i = 0; i < N; i += 7) targets[i] = -1;  // ignored rows
  const float dloss = 1.f / N;
  const size_t n = static_cast<size_t>(N) * Vl;
  std::vector<std::vector<float>> logits(parts), rmax(parts, std::vector<float>(N)), sums(parts);
  std::vector<float> gmax(N, -INFINITY), gsums(2 * static_cast<size_t>(N), 0.f);
  for (int k = 0; k < parts; ++k) {
    logits[k] = randn(n, 3.f);
    vocab_shard_row_max(rmax[k].data(), logits[k].data(), targets.data(), N, V, Vl, k * Vl);
    for (int i = 0; i < N; ++i) gmax[i] = std::max(gmax[i], rmax[k][i]);
  }
  for (int k = 0; k < parts; ++k) {
    sums[k].resize(2 * static_cast<size_t>(N));
    vocab_shard_sum_exp(sums[k].data(), logits[k].data(), gmax.data(), targets.data(), N, V, Vl, k * Vl);
    for (size_t i = 0; i < gsums.size(); ++i) gsums[i] += sums[k][i];
  }
  auto d_t = up(targets);
  auto d_gmax = up(gmax), d_gsums = up(gsums);
  for (int k = 0; k < parts; ++k) {
    const int v0 = k * Vl;
    std::vector<float> loss(N), dl(n), loss16(N);
    std::vector<bf16_t> dl16(n);
    vocab_shard_loss_grad(loss.data(), dl.data(), logits[k].data(), gmax.data(), gsums.data(), targets.data(), N, V,
                          Vl, v0, dloss);
    vocab_shard_loss_grad_bf16(loss16.data(), dl16.data(), logits[k].data(), gmax.data(), gsums.data(),
                               targets.data(), N, V, Vl, v0, dloss);
    auto d_x = up(logits[k]);
    const Outputs got = twice([&] {
      auto rm = poisoned<float>(N), sm = poisoned<float>(2 * static_cast<size_t>(N));
      auto l = poisoned<float>(N), d = poisoned<float>(n), l16 = poisoned<float>(N), l0 = poisoned<float>(N);
      auto d16 = poisoned<bf16_t>(n);
      auto inplace = up(logits[k]), untouched = up(logits[k]);
      auto l2 = poisoned<float>(N);
      cuda::vocab_shard_row_max(rm.data(), d_x.data(), d_t.data(), N, V, Vl, v0, {});
      cuda::vocab_shard_sum_exp(sm.data(), d_x.data(), d_gmax.data(), d_t.data(), N, V, Vl, v0, {});
      cuda::vocab_shard_loss_grad(l.data(), d.data(), d_x.data(), d_gmax.data(), d_gsums.data(), d_t.data(), N, V,
                                  Vl, v0, dloss, {});
      cuda::vocab_shard_loss_grad_bf16(l16.data(), d16.data(), d_x.data(), d_gmax.data(), d_gsums.data(),
                                       d_t.data(), N, V, Vl, v0, dloss, {});
      cuda::vocab_shard_loss_grad(l2.data(), inplace.data(), inplace.data(), d_gmax.data(), d_gsums.data(),
                                  d_t.data(), N, V, Vl, v0, dloss, {});
      cuda::vocab_shard_loss_grad(l0.data(), untouched.data(), d_x.data(), d_gmax.data(), d_gsums.data(),
                                  d_t.data(), N, V, Vl, v0, 0.f, {});
      return Outputs{down(rm), down(sm), down(l), down(d), down(l16), down(d16), down(l2), down(inplace),
                     down(l0), down(untouched)};
    });
    std::string sh = dims(" ", N, Vl);
    sh += " v0 ";
    sh += std::to_string(v0);
    expect_bits("vocab ce row max" + sh, got[0], rmax[k]);
    expect_close("vocab ce sums" + sh, got[1], sums[k], 1e-5);
    expect_close("vocab ce losses" + sh, got[2], loss, 1e-5);
    expect_close("vocab ce dlogits" + sh, got[3], dl, 1e-5);
    expect_close("vocab ce losses (bf16 grad)" + sh, got[4], loss16, 1e-5);
    expect_close("vocab ce dlogits bf16" + sh, got[5], widen(dl16), 1e-2);
    expect_close("vocab ce losses in place" + sh, got[6], loss, 1e-5);
    expect_close("vocab ce dlogits in place" + sh, got[7], dl, 1e-5);
    expect_close("vocab ce losses (dloss 0)" + sh, got[8], loss, 1e-5);
    expect_bits("vocab ce dloss 0 leaves dlogits" + sh, got[9], logits[k]);
  }
}

TEST_F(CudaKernels, VocabParallelCrossEntropyMatchesCpu) {
  check_vocab_shards(256, 50257, 50304 / 4, 4);  // GPT-2's padded vocabulary over 4 ranks
  check_vocab_shards(37, 1000, 300, 5);          // the last part all padding, the one before partly
}

// backend.h's embedding entries against plain loops (rows in ascending order: the same bits).
TEST_F(CudaKernels, EmbeddingRowsMatchLoopsBitForBit) {
  struct Case {
    int N, C, T, V, v0, v1, lo, hi, n, row0;
  };
  for (const Case& c : {Case{4096, 768, 1024, 50304, 12576, 25152, 0, 4096, 4096, 0},
                        Case{111, 129, 37, 50, 10, 33, 5, 100, 61, 50}}) {
    const size_t Vl = static_cast<size_t>(c.v1 - c.v0), C = static_cast<size_t>(c.C);
    const auto ids = rand_ids(c.N, 0, c.V);
    const auto wte = randn(Vl * C), wpe = randn(c.T * C), base = randn(c.n * C);
    const auto d_full = randn(c.N * C), d_local = randn(c.n * C), dwte0 = randn(Vl * C), dwpe0 = randn(c.T * C);
    std::vector<float> out(c.N * C), pos = base, dwte = dwte0, dwpe = dwpe0;
    std::memset(out.data(), 0xFF, out.size() * sizeof(float));  // rows outside [lo, hi) stay poisoned
    for (int i = c.lo; i < c.hi; ++i)
      for (size_t k = 0; k < C; ++k)
        out[i * C + k] = ids[i] >= c.v0 && ids[i] < c.v1 ? wte[(ids[i] - c.v0) * C + k] : 0.f;
    for (int i = 0; i < c.n; ++i)
      for (size_t k = 0; k < C; ++k) {
        pos[i * C + k] += wpe[((c.row0 + i) % c.T) * C + k];
        dwpe[((c.row0 + i) % c.T) * C + k] += d_local[i * C + k];
      }
    for (int i = 0; i < c.N; ++i)
      for (size_t k = 0; k < C; ++k)
        if (ids[i] >= c.v0 && ids[i] < c.v1) dwte[(ids[i] - c.v0) * C + k] += d_full[i * C + k];
    auto d_ids = up(ids);
    auto d_wte = up(wte), d_wpe = up(wpe), d_df = up(d_full), d_dl = up(d_local);
    const Outputs got = twice([&] {
      auto o = poisoned<float>(out.size());
      auto p = up(base), dte = up(dwte0), dpe = up(dwpe0);
      cuda::embedding_lookup(o.data(), d_ids.data(), d_wte.data(), c.lo, c.hi, c.C, c.v0, c.v1, {});
      cuda::add_position_embedding(p.data(), d_wpe.data(), c.n, c.C, c.T, c.row0, {});
      cuda::embedding_backward_rows(dte.data(), dpe.data(), d_df.data(), d_dl.data(), d_ids.data(), c.N, c.n, c.C,
                                    c.T, c.row0, c.v0, c.v1, {});
      return Outputs{down(o), down(p), down(dte), down(dpe)};
    });
    const std::string sh = dims(" ", c.N, c.C);
    expect_bits("embedding lookup" + sh, got[0], out);
    expect_bits("embedding add position" + sh, got[1], pos);
    expect_bits("embedding dwte rows" + sh, got[2], dwte);
    expect_bits("embedding dwpe rows" + sh, got[3], dwpe);
  }
}

TEST_F(CudaKernels, FillAndScaleAreExact) {
  const size_t n = (size_t{1} << 20) + 3;
  const auto x = randn(n);
  std::vector<float> filled(n, -2.5f), scaled = x;
  for (float& v : scaled) v *= 0.37f;
  auto d_x = up(x);
  const Outputs got = twice([&] {
    auto f = poisoned<float>(n);
    auto s = up(x), one = up(x);
    cuda::fill(f.data(), n, -2.5f, {});
    cuda::scale(s.data(), n, 0.37f, {});
    cuda::scale(one.data(), n, 1.f, {});
    return Outputs{down(f), down(s), down(one)};
  });
  expect_bits("fill", got[0], filled);
  expect_bits("scale", got[1], scaled);
  expect_bits("scale by 1", got[2], x);
}

// optim/lamb.h's two phases on one tensor, through cuda_optim_kernels() (the cuda:: entries).
TEST_F(CudaKernels, LambMatchesCpu) {
  OptimKernels& ok = cuda_optim_kernels();
  for (const size_t n : {(size_t{1} << 20) + 7, size_t{1000}})
    for (const bool decay : {true, false})
      for (const bool bc : {true, false}) {
        const auto p0 = randn(n), g0 = randn(n, 0.1f), m0 = randn(n, 0.01f);
        auto v0 = randn(n, 0.01f);
        for (float& v : v0) v = v * v;
        const int t = decay ? 5 : 1;
        const float lr = 2e-3f;
        LambHyper h;
        h.bias_correction = bc;
        h.max_trust = bc ? 10.f : 0.f;
        std::vector<float> p = p0, m = m0, v = v0, u(n);
        double w_sq = 0, r_sq = 0;
        const std::vector<ParamTensor> tensors{ParamTensor{"w", 0, n, decay}};
        lamb_compute_update(p.data(), g0.data(), m.data(), v.data(), u.data(), tensors, t, h, &w_sq, &r_sq);
        const float step = lr * lamb_trust_ratio(std::sqrt(w_sq), std::sqrt(r_sq), h.max_trust);
        lamb_apply_update(p.data(), u.data(), tensors, lr, h, &w_sq, &r_sq);
        auto d_g = up(g0);
        std::vector<double> sums;
        const Outputs got = twice([&] {
          auto dp = up(p0), dm = up(m0), dv = up(v0);
          auto du = poisoned<float>(n);
          double w = -1, r = -1;
          ok.lamb_compute_update(dp.data(), d_g.data(), dm.data(), dv.data(), du.data(), n, decay, t, h.adam.beta1,
                                 h.adam.beta2, h.adam.eps, h.adam.weight_decay, bc, &w, &r);
          ok.lamb_apply_update(dp.data(), du.data(), n, step);
          sums.push_back(w);
          sums.push_back(r);
          return Outputs{down(dp), down(dm), down(dv), down(du)};
        });
        std::string sh = " n ";
        sh += std::to_string(n);
        sh += " t ";
        sh += std::to_string(t);
        sh += decay ? " decay" : "";
        sh += bc ? " bias-corrected" : "";
        expect_close("lamb params" + sh, got[0], p, 1e-5);
        expect_close("lamb m" + sh, got[1], m, 1e-5);
        expect_close("lamb v" + sh, got[2], v, 1e-5);
        expect_close("lamb r" + sh, got[3], u, 1e-5);
        ASSERT_EQ(sums.size(), 4u);
        EXPECT_EQ(0, std::memcmp(&sums[0], &sums[2], 2 * sizeof(double))) << "lamb sums differ between runs" << sh;
        EXPECT_NEAR(sums[0], w_sq, 1e-10 * w_sq) << "lamb ||p||^2" << sh;
        EXPECT_NEAR(sums[1], r_sq, 1e-10 * r_sq) << "lamb ||r||^2" << sh;
      }
}

TEST_F(CudaKernels, SumSquaresMatchesCpu) {
  OptimKernels& ok = cuda_optim_kernels();
  for (const size_t n : {size_t{0}, size_t{1}, size_t{1000}, (size_t{1} << 22) + 5}) {
    const auto x = randn(n, 0.3f);
    const double ref = grad_sq_sum(x.data(), n);
    auto d_x = up(x);
    const double a = ok.sum_squares(d_x.data(), n), b = ok.sum_squares(d_x.data(), n);
    EXPECT_EQ(0, std::memcmp(&a, &b, sizeof(double))) << "sum_squares differs between runs, n " << n;
    EXPECT_NEAR(a, ref, 1e-12 * ref) << "sum_squares n " << n;
  }
}

TEST_F(CudaKernels, MaskedLossMeanMatchesCpu) {
  KernelBackend& k = cuda_kernels();
  EXPECT_EQ(k.device(), Device::kCuda);
  for (const int N : {4096, 37, 1}) {
    auto losses = randn(static_cast<size_t>(N), 2.f);
    for (float& l : losses) l = std::fabs(l);
    auto targets = rand_ids(static_cast<size_t>(N), 0, 50257);
    for (int i = 0; i < N; i += 5) targets[i] = -1;
    double sum = 0;
    int count = 0;
    for (int i = 0; i < N; i++)
      if (targets[i] >= 0) {
        sum += losses[i];
        count++;
      }
    const float ref = count ? static_cast<float>(sum / count) : 0.f;
    auto d_l = up(losses);
    EXPECT_EQ(k.masked_loss_mean(d_l.data(), targets.data(), N), ref) << "N " << N;
    std::vector<int> none(static_cast<size_t>(N), -1);
    EXPECT_EQ(k.masked_loss_mean(d_l.data(), none.data(), N), 0.f) << "no counted row, N " << N;
  }
}

TEST_F(CudaKernels, CallErrorsNameTheCall) {
  // An impossible allocation fails inside cudaMalloc: the error names the call and file:line.
  try {
    device_malloc(size_t{1} << 60);
    FAIL() << "a 1 EiB allocation succeeded";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaMalloc"), std::string::npos) << what;
    EXPECT_NE(what.find("device_cuda.cpp:"), std::string::npos) << what;
  }
}

struct AttnShape {
  int B, T, C, NH, W;
};
// GPT-2 124M's attention (T = 1024, C = 768, 12 heads of 64), full and sliding, and odd shapes.
const std::vector<AttnShape> kAttnShapes = {{2, 1024, 768, 12, 0},   {4, 1024, 768, 12, 256}, {1, 1024, 768, 12, 1024},
                                            {3, 77, 72, 3, 0},       {2, 1, 64, 2, 0},        {1, 200, 32, 4, 50},
                                            {2, 130, 256, 2, 0},     {1, 300, 96, 2, 2000}};
std::string name(const char* op, const AttnShape& s) {
  return std::string(op) + " B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" + std::to_string(s.C) +
         " NH" + std::to_string(s.NH) + " W" + std::to_string(s.W);
}

// Forward and backward against the CPU kernel; the backward takes the CPU forward's out and lse (so
// each direction is checked on its own). W >= T must give the bits of W = 0 (the same band).
void check_attention(bool bf16) {
  const double tol = bf16 ? 1e-2 : 1e-5;
  for (const AttnShape& s : kAttnShapes) {
    const size_t n3 = static_cast<size_t>(s.B) * s.T * 3 * s.C, no = n3 / 3, nl = static_cast<size_t>(s.B) * s.NH * s.T;
    const auto qkv = randn(n3), dout = randn(no);
    std::vector<float> rout(no), rlse(nl), rdqkv(n3);
    (bf16 ? attention_forward_bf16 : attention_forward)(rout.data(), rlse.data(), qkv.data(), s.B, s.T, s.C, s.NH, s.NH,
                                                        s.W);
    (bf16 ? attention_backward_bf16 : attention_backward)(rdqkv.data(), dout.data(), qkv.data(), rout.data(),
                                                          rlse.data(), s.B, s.T, s.C, s.NH, s.NH, s.W);
    auto d_qkv = up(qkv), d_dout = up(dout), d_rout = up(rout), d_rlse = up(rlse);
    const auto run = [&](int W) {
      return twice([&] {
        auto out = poisoned<float>(no), lse = poisoned<float>(nl), dqkv = poisoned<float>(n3);
        (bf16 ? cuda::attention_forward_bf16 : cuda::attention_forward)(out.data(), lse.data(), d_qkv.data(), s.B,
                                                                       s.T, s.C, s.NH, s.NH, W, {});
        (bf16 ? cuda::attention_backward_bf16 : cuda::attention_backward)(
            dqkv.data(), d_dout.data(), d_qkv.data(), d_rout.data(), d_rlse.data(), s.B, s.T, s.C, s.NH, s.NH, W, {});
        return Outputs{down(out), down(lse), down(dqkv)};
      });
    };
    const Outputs got = run(s.W);
    const char* p = bf16 ? "attn bf16 " : "attn fp32 ";
    expect_close(name((std::string(p) + "out").c_str(), s), got[0], rout, tol);
    expect_close(name((std::string(p) + "lse").c_str(), s), got[1], rlse, tol);
    expect_close(name((std::string(p) + "dqkv").c_str(), s), got[2], rdqkv, tol);
    if (s.W >= s.T) {  // a window as long as the sequence is full causal attention
      const Outputs full = run(0);
      for (size_t k = 0; k < full.size(); ++k) expect_bits(name("attn W>=T vs W=0", s), got[k], full[k]);
    }
  }
}

TEST_F(CudaKernels, AttentionFp32MatchesCpu) { check_attention(false); }
TEST_F(CudaKernels, AttentionBf16MatchesCpu) { check_attention(true); }

TEST_F(CudaKernels, AttentionRejectsBadShapes) {
  DeviceBuffer<float> buf(3 * 2 * 4 * 258);
  // head size 258 > 128; C not divisible by NH; NH not divisible by NKV; NKV 0
  EXPECT_THROW(cuda::attention_forward(buf.data(), buf.data(), buf.data(), 1, 2, 258, 1, 1, 0, {}), Error);
  EXPECT_THROW(cuda::attention_forward(buf.data(), buf.data(), buf.data(), 1, 2, 10, 3, 3, 0, {}), Error);
  EXPECT_THROW(cuda::attention_forward(buf.data(), buf.data(), buf.data(), 1, 2, 12, 3, 2, 0, {}), Error);
  EXPECT_THROW(cuda::attention_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), 1, 2, 12, 3, 0, 0,
                                        {}),
               Error);
}

}  // namespace
}  // namespace ms
