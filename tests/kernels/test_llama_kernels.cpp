// test_llama_kernels: the Llama-style CPU kernels (rmsnorm.h, rope.h, swiglu.h, layernorm.h's eps)
// against PyTorch (float64, forward and autograd backward of sum(out * g), written here from the
// published formulas: x / sqrt(mean(x^2) + eps) * w; Hugging Face's rotate_half RoPE with inv_freq
// = 1 / theta^(arange(0, HS, 2) / HS) on the query and key heads of a packed (NH + 2 NKV) HS row,
// values untouched; silu(gate) * up), against central finite differences of each backward (double
// references of the same formulas), and for the properties the model relies on: bit-identical
// results for 1, 2 and 3 threads, rope_backward the exact inverse rotation (the transpose),
// swiglu_forward_bf16 the round-to-nearest-even of the fp32 result, the backward accumulating (+=)
// where the header says so, and bad shapes refused by name.
// Tolerances (fp32 kernels vs float64): 1e-5 relative to the largest reference value (measured
// ~1e-7); finite differences (h = 1e-6 in double on double references): 1e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/bf16.h"
#include "base/check.h"
#include "common/test_util.h"
#include "kernels/layernorm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace {

using ms::testing::expect_bitwise_equal;
using ms::testing::TestRng;
using ms::testing::with_threads;

constexpr int B = 2, T = 37, NH = 4, NKV = 2, HS = 16, W = (NH + 2 * NKV) * HS, N = B * T, C = 48, F = 40;
constexpr float kEps = 1e-6f;
constexpr double kTheta = 500.0;

// The oracle: reads the dumps, prints "<name> <max abs diff> <max abs reference>" per output.
constexpr const char* kScript = R"PY(
import sys, numpy as np, torch
torch.set_default_dtype(torch.float64)
d = sys.argv[1]
B, T, NH, NKV, HS, N, C, F, eps, theta = 2, 37, 4, 2, 16, 74, 48, 40, 1e-6, 500.0
def L(name, *shape):
    return torch.from_numpy(np.fromfile(f"{d}/{name}.bin", dtype=np.float32).astype(np.float64).reshape(*shape))
def rep(name, got, ref):
    print(name, (got - ref).abs().max().item(), ref.abs().max().item())
# RMSNorm
x = L("rms_x", N, C).requires_grad_(); w = L("rms_w", C).requires_grad_(); g = L("rms_g", N, C)
y = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w; (y * g).sum().backward()
rep("rmsnorm_out", L("rms_out", N, C), y.detach()); rep("rmsnorm_dinp", L("rms_dx", N, C), x.grad)
rep("rmsnorm_dweight", L("rms_dw", C), w.grad)
# LayerNorm with eps 1e-6
x2 = L("rms_x", N, C); y2 = torch.nn.functional.layer_norm(x2, (C,), L("rms_w", C), L("ln_b", C), eps=eps)
rep("layernorm_eps_out", L("ln_out", N, C), y2)
# RoPE on the q and k heads of packed rows
qkv = L("rope_in", B, T, NH + 2 * NKV, HS).requires_grad_(); g = L("rope_g", B, T, NH + 2 * NKV, HS)
inv = 1.0 / theta ** (torch.arange(0, HS, 2) / HS); fr = torch.arange(T)[:, None] * inv[None, :]
emb = torch.cat([fr, fr], -1); cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
def rot(z): return torch.cat([-z[..., HS // 2:], z[..., :HS // 2]], -1)
qk = qkv[:, :, :NH + NKV]; out = torch.cat([qk * cos + rot(qk) * sin, qkv[:, :, NH + NKV:]], 2)
(out * g).sum().backward()
rep("rope_out", L("rope_out", B, T, NH + 2 * NKV, HS), out.detach())
rep("rope_backward", L("rope_dx", B, T, NH + 2 * NKV, HS), qkv.grad)
# SwiGLU
pre = L("sw_pre", N, 2 * F).requires_grad_(); g = L("sw_g", N, F)
o = torch.nn.functional.silu(pre[:, :F]) * pre[:, F:]; (o * g).sum().backward()
rep("swiglu_out", L("sw_out", N, F), o.detach()); rep("swiglu_dpre", L("sw_dpre", N, 2 * F), pre.grad)
)PY";

struct Dumps {
  std::string dir = ms::testing::make_temp_dir("llama_kernels");
  void operator()(const std::string& name, const std::vector<float>& v) const {
    std::ofstream f(dir + "/" + name + ".bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  }
};

struct Rms {
  std::vector<float> out, rstd, dx, dw;
};
Rms run_rmsnorm(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& g, int n, int c) {
  Rms r{std::vector<float>((size_t)n * c), std::vector<float>(n), std::vector<float>((size_t)n * c, 0.0f),
        std::vector<float>(c, 0.0f)};
  ms::rmsnorm_forward(r.out.data(), r.rstd.data(), x.data(), w.data(), n, c, kEps);
  ms::rmsnorm_backward(r.dx.data(), r.dw.data(), g.data(), x.data(), w.data(), r.rstd.data(), n, c);
  return r;
}

std::vector<float> rope_tables(std::vector<float>& sin) {
  std::vector<float> cos((size_t)T * HS / 2);
  sin.resize(cos.size());
  ms::rope_table(cos.data(), sin.data(), T, HS, kTheta);
  return cos;
}

TEST(LlamaKernels, MatchTorchFloat64) {
  Dumps dump;
  TestRng rng(36);
  {  // RMSNorm, and LayerNorm with eps 1e-6 on the same rows
    const auto x = rng.vec((size_t)N * C, -2, 2), w = rng.vec(C, -1, 1), g = rng.vec((size_t)N * C, -1, 1);
    const Rms r = run_rmsnorm(x, w, g, N, C);
    dump("rms_x", x), dump("rms_w", w), dump("rms_g", g), dump("rms_out", r.out), dump("rms_dx", r.dx),
        dump("rms_dw", r.dw);
    const auto b = rng.vec(C, -1, 1);
    std::vector<float> out((size_t)N * C), mean(N), rstd(N);
    ms::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, kEps);
    dump("ln_b", b), dump("ln_out", out);
  }
  {  // RoPE: forward on a copy, backward of the gradient g
    std::vector<float> sin;
    const std::vector<float> cos = rope_tables(sin);
    const auto in = rng.vec((size_t)N * W, -1, 1), g = rng.vec((size_t)N * W, -1, 1);
    std::vector<float> out = in, dx = g;
    ms::rope_forward(out.data(), cos.data(), sin.data(), 0, N, T, NH, NKV, HS);
    ms::rope_backward(dx.data(), cos.data(), sin.data(), 0, N, T, NH, NKV, HS);
    dump("rope_in", in), dump("rope_g", g), dump("rope_out", out), dump("rope_dx", dx);
  }
  {  // SwiGLU, gates up to +-12 (saturated sigmoid)
    const auto pre = rng.vec((size_t)N * 2 * F, -12, 12), g = rng.vec((size_t)N * F, -1, 1);
    std::vector<float> out((size_t)N * F), dpre((size_t)N * 2 * F);
    ms::swiglu_forward(out.data(), pre.data(), N, F);
    ms::swiglu_backward(dpre.data(), g.data(), pre.data(), N, F);
    dump("sw_pre", pre), dump("sw_g", g), dump("sw_out", out), dump("sw_dpre", dpre);
  }
  {
    std::ofstream(dump.dir + "/oracle.py") << kScript;
  }
  const auto r = ms::testing::run_cmd(std::string(ms::testing::torch_python()) + " " + dump.dir + "/oracle.py " +
                                      dump.dir);
  ASSERT_EQ(r.code, 0) << r.output;
  std::istringstream lines(r.output);
  int checked = 0;
  for (std::string name; lines >> name;) {
    double diff = 0, scale = 0;
    lines >> diff >> scale;
    EXPECT_LE(diff, 1e-5 * std::max(1.0, scale)) << name << " (largest reference value " << scale << ")";
    std::printf("%s: max abs diff %.3g (reference up to %.3g)\n", name.c_str(), diff, scale);
    checked++;
  }
  EXPECT_EQ(checked, 8);
  std::filesystem::remove_all(dump.dir);
}

// Central finite differences of sum(out * g) for each backward, on double references of the same
// formulas (a wrong term of a backward is a gradient of another function).
TEST(LlamaKernels, BackwardsMatchFiniteDifferences) {
  TestRng rng(37);
  const int n = 3, c = 8, f = 5;
  {
    const auto x = rng.vec((size_t)n * c, -2, 2), w = rng.vec(c, -1, 1), g = rng.vec((size_t)n * c, -1, 1);
    const Rms r = run_rmsnorm(x, w, g, n, c);
    auto loss = [&](const std::vector<double>& xw) {  // xw: x then w
      double s = 0;
      for (int i = 0; i < n; i++) {
        double ms2 = 0;
        for (int j = 0; j < c; j++) ms2 += xw[i * c + j] * xw[i * c + j];
        const double rs = 1.0 / std::sqrt(ms2 / c + kEps);
        for (int j = 0; j < c; j++) s += xw[i * c + j] * rs * xw[n * c + j] * g[i * c + j];
      }
      return s;
    };
    std::vector<double> xw(x.begin(), x.end());
    xw.insert(xw.end(), w.begin(), w.end());
    const auto fd = ms::testing::finite_diff(xw, loss);
    std::vector<float> got = r.dx;
    got.insert(got.end(), r.dw.begin(), r.dw.end());
    ms::testing::expect_close(got, fd, 1e-4, 1e-5, "rmsnorm backward vs finite differences");
  }
  {
    const auto pre = rng.vec((size_t)n * 2 * f, -4, 4), g = rng.vec((size_t)n * f, -1, 1);
    std::vector<float> dpre(pre.size());
    ms::swiglu_backward(dpre.data(), g.data(), pre.data(), n, f);
    auto loss = [&](const std::vector<double>& p) {
      double s = 0;
      for (int i = 0; i < n; i++)
        for (int j = 0; j < f; j++) {
          const double gate = p[i * 2 * f + j], up = p[i * 2 * f + f + j];
          s += gate / (1.0 + std::exp(-gate)) * up * g[i * f + j];
        }
      return s;
    };
    const auto fd = ms::testing::finite_diff(std::vector<double>(pre.begin(), pre.end()), loss);
    ms::testing::expect_close(dpre, fd, 1e-4, 1e-5, "swiglu backward vs finite differences");
  }
}

TEST(LlamaKernels, RopeBackwardIsTheInverseRotationAndValuesStay) {
  std::vector<float> sin;
  const std::vector<float> cos = rope_tables(sin);
  TestRng rng(38);
  const auto in = rng.vec((size_t)N * W, -1, 1);
  std::vector<float> x = in;
  // Rows in two ranges (as the QKV GEMM's chunks arrive), then back.
  ms::rope_forward(x.data(), cos.data(), sin.data(), 0, 20, T, NH, NKV, HS);
  ms::rope_forward(x.data(), cos.data(), sin.data(), 20, N, T, NH, NKV, HS);
  for (int r = 0; r < N; r++)
    for (int k = (NH + NKV) * HS; k < W; k++) ASSERT_EQ(x[(size_t)r * W + k], in[(size_t)r * W + k]) << "a value moved";
  for (int k = 0; k < (NH + NKV) * HS; k++) ASSERT_EQ(x[k], in[k]) << "position 0 is the identity";
  ms::rope_backward(x.data(), cos.data(), sin.data(), 0, N, T, NH, NKV, HS);
  double worst = 0;
  for (size_t i = 0; i < x.size(); i++) worst = std::max(worst, (double)std::fabs(x[i] - in[i]));
  EXPECT_LT(worst, 1e-6) << "R^T R != I";
  EXPECT_THROW(ms::rope_forward(x.data(), cos.data(), sin.data(), 0, N, T, NH, NKV, 15), ms::Error);  // odd HS
  std::vector<float> c2(8), s2(8);
  EXPECT_THROW(ms::rope_table(c2.data(), s2.data(), 4, 4, 1.0), ms::Error);  // theta <= 1
}

TEST(LlamaKernels, BitIdenticalAcrossThreadCountsAndBf16IsTheRoundedFp32) {
  TestRng rng(39);
  const int n = 300, c = 200, f = 96;
  const auto x = rng.vec((size_t)n * c, -2, 2), w = rng.vec(c, -1, 1), g = rng.vec((size_t)n * c, -1, 1);
  const auto pre = rng.vec((size_t)n * 2 * f, -6, 6), gs = rng.vec((size_t)n * f, -1, 1);
  auto run_all = [&] {
    std::vector<std::vector<float>> out;
    const Rms r = run_rmsnorm(x, w, g, n, c);
    out.push_back(r.out), out.push_back(r.dx), out.push_back(r.dw);
    std::vector<float> so((size_t)n * f), sd(pre.size());
    ms::swiglu_forward(so.data(), pre.data(), n, f);
    ms::swiglu_backward(sd.data(), gs.data(), pre.data(), n, f);
    out.push_back(so), out.push_back(sd);
    return out;
  };
  std::vector<std::vector<float>> one, more;
  with_threads(1, [&] { one = run_all(); });
  for (int t : {2, 3}) {
    with_threads(t, [&] { more = run_all(); });
    for (size_t i = 0; i < one.size(); i++) expect_bitwise_equal(one[i], more[i], "output " + std::to_string(i));
  }
  std::vector<ms::bf16_t> b16((size_t)n * f);
  ms::swiglu_forward_bf16(b16.data(), pre.data(), n, f);
  for (size_t i = 0; i < b16.size(); i++) ASSERT_EQ(b16[i], ms::f32_to_bf16_rne(one[3][i])) << "element " << i;
  // The backward accumulates into dinp and dweight: a second call doubles them.
  Rms twice = run_rmsnorm(x, w, g, n, c);
  std::vector<float> rstd(n), out((size_t)n * c);
  ms::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, c, kEps);
  ms::rmsnorm_backward(twice.dx.data(), twice.dw.data(), g.data(), x.data(), w.data(), rstd.data(), n, c);
  for (size_t i = 0; i < twice.dx.size(); i++) ASSERT_EQ(twice.dx[i], one[1][i] + one[1][i]) << "dinp " << i;
  EXPECT_THROW(ms::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), n, 0, kEps), ms::Error);
  EXPECT_THROW(ms::swiglu_forward(out.data(), pre.data(), n, 0), ms::Error);
}

}  // namespace
