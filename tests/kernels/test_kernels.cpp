// Tests of the fused row kernels (layernorm, bias+GeLU, softmax cross-entropy) against naive
// double-precision references written here, double-precision central finite differences of
// sum(out * g) for a random g, in-place aliasing, padded vocabulary / ignored targets, and
// bit-identical results for 1, 2 and 3 OpenMP threads. The last test re-runs this whole binary
// with MS_KERNEL_ISA=generic so that the baseline (non-AVX-512) code path is tested too.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>  // getpid

#include <gtest/gtest.h>

#include "base/check.h"
#include "common/test_util.h"  // ms::testing::run_cmd
#include "base/bf16.h"
#include "kernels/bf16_convert.h"
#include "kernels/cross_entropy.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"

namespace {

using Rng = ms::testing::TestRng;
using ms::testing::expect_bitwise_equal;
using ms::testing::expect_close;
using ms::testing::finite_diff;
using ms::testing::with_threads;
std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// Runs fn with `threads` OpenMP threads, restoring the previous setting.
// ---------------------------------------------------------------- layernorm references (double)

void ln_forward_ref(std::vector<double>& out, std::vector<double>& mean, std::vector<double>& rstd,
                    const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                    int N, int C) {
  out.assign((size_t)N * C, 0.0);
  mean.assign(N, 0.0);
  rstd.assign(N, 0.0);
  for (int i = 0; i < N; ++i) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[(size_t)i * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[(size_t)i * C + c] - m) * (x[(size_t)i * C + c] - m);
    v /= C;
    const double r = 1.0 / std::sqrt(v + 1e-5);
    for (int c = 0; c < C; ++c) out[(size_t)i * C + c] = (x[(size_t)i * C + c] - m) * r * w[c] + b[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

// Analytic gradients of sum(out * g) (textbook formula, double).
void ln_backward_ref(std::vector<double>& dx, std::vector<double>& dw, std::vector<double>& db,
                     const std::vector<double>& g, const std::vector<double>& x, const std::vector<double>& w,
                     int N, int C) {
  std::vector<double> out, mean, rstd;
  ln_forward_ref(out, mean, rstd, x, w, std::vector<double>(C, 0.0), N, C);
  dx.assign((size_t)N * C, 0.0);
  dw.assign(C, 0.0);
  db.assign(C, 0.0);
  for (int i = 0; i < N; ++i) {
    const double* xi = &x[(size_t)i * C];
    const double* gi = &g[(size_t)i * C];
    double a = 0, bsum = 0;
    for (int c = 0; c < C; ++c) {
      const double xhat = (xi[c] - mean[i]) * rstd[i];
      a += gi[c] * w[c];
      bsum += gi[c] * w[c] * xhat;
      dw[c] += gi[c] * xhat;
      db[c] += gi[c];
    }
    for (int c = 0; c < C; ++c) {
      const double xhat = (xi[c] - mean[i]) * rstd[i];
      dx[(size_t)i * C + c] = rstd[i] * (gi[c] * w[c] - a / C - xhat * bsum / C);
    }
  }
}

TEST(LayerNorm, ForwardMatchesNaive) {
  for (auto [N, C] : {std::pair{7, 37}, std::pair{65, 48}, std::pair{3, 768}}) {
    Rng rng(1 + N * 1000 + C);
    auto x = rng.vec((size_t)N * C, -2, 3), w = rng.vec(C), b = rng.vec(C);
    std::vector<float> out((size_t)N * C), mean(N), rstd(N);
    ms::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    std::vector<double> ro, rm, rr;
    ln_forward_ref(ro, rm, rr, to_double(x), to_double(w), to_double(b), N, C);
    const std::string tag = "N=" + std::to_string(N) + " C=" + std::to_string(C);
    expect_close(out, ro, 1e-5, 1e-5, "ln out " + tag);
    expect_close(mean, rm, 1e-5, 1e-6, "ln mean " + tag);
    expect_close(rstd, rr, 1e-5, 1e-6, "ln rstd " + tag);
  }
}

TEST(LayerNorm, BackwardAccumulatesNaiveGradient) {
  for (auto [N, C] : {std::pair{7, 37}, std::pair{70, 48}}) {
    Rng rng(7 + N + C);
    auto x = rng.vec((size_t)N * C, -2, 3), w = rng.vec(C), b = rng.vec(C), g = rng.vec((size_t)N * C);
    std::vector<float> out((size_t)N * C), mean(N), rstd(N);
    ms::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    // Pre-existing gradient contents must be accumulated into, not overwritten.
    auto dx = rng.vec((size_t)N * C), dw = rng.vec(C), db = rng.vec(C);
    const auto dx0 = dx, dw0 = dw, db0 = db;
    ms::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    std::vector<double> rdx, rdw, rdb;
    ln_backward_ref(rdx, rdw, rdb, to_double(g), to_double(x), to_double(w), N, C);
    for (size_t i = 0; i < rdx.size(); ++i) rdx[i] += dx0[i];
    for (int c = 0; c < C; ++c) { rdw[c] += dw0[c]; rdb[c] += db0[c]; }
    expect_close(dx, rdx, 1e-4, 1e-5, "ln dinp");
    expect_close(dw, rdw, 1e-5, 1e-5, "ln dweight");
    expect_close(db, rdb, 1e-5, 1e-5, "ln dbias");
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const int N = 3, C = 11;
  Rng rng(11);
  auto x = rng.vec((size_t)N * C, -2, 2), w = rng.vec(C), b = rng.vec(C), g = rng.vec((size_t)N * C);
  std::vector<float> out((size_t)N * C), mean(N), rstd(N), dx((size_t)N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
  ms::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  ms::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  const auto xd = to_double(x), wd = to_double(w), bd = to_double(b), gd = to_double(g);
  auto loss = [&](const std::vector<double>& X, const std::vector<double>& W, const std::vector<double>& Bv) {
    std::vector<double> o, m, r;
    ln_forward_ref(o, m, r, X, W, Bv, N, C);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * gd[i];
    return s;
  };
  expect_close(dx, finite_diff(xd, [&](const auto& X) { return loss(X, wd, bd); }), 1e-4, 1e-5, "ln dinp vs FD");
  expect_close(dw, finite_diff(wd, [&](const auto& W) { return loss(xd, W, bd); }), 1e-4, 1e-5, "ln dweight vs FD");
  expect_close(db, finite_diff(bd, [&](const auto& Bv) { return loss(xd, wd, Bv); }), 1e-4, 1e-5, "ln dbias vs FD");
}

TEST(LayerNorm, BitIdenticalAcrossThreadCounts) {
  const int N = 203, C = 96;  // several 32-row chunks, a partial last chunk
  Rng rng(5);
  auto x = rng.vec((size_t)N * C, -2, 3), w = rng.vec(C), b = rng.vec(C), g = rng.vec((size_t)N * C);
  auto run = [&](int threads) {
    std::vector<float> out((size_t)N * C), mean(N), rstd(N), dx((size_t)N * C, 0.5f), dw(C, 0.25f), db(C, -1.0f);
    with_threads(threads, [&] {
      ms::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
      ms::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
    });
    return std::vector<std::vector<float>>{out, mean, rstd, dx, dw, db};
  };
  const auto r1 = run(1);
  for (int t : {2, 3}) {
    const auto rt = run(t);
    for (size_t k = 0; k < r1.size(); ++k) expect_bitwise_equal(r1[k], rt[k], "layernorm output " + std::to_string(k) + " threads=" + std::to_string(t));
  }
}

// ---------------------------------------------------------------- GeLU references (double)

constexpr double kGeluK = 0.7978845608028654;  // sqrt(2/pi)

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluK * (x + 0.044715 * x * x * x))); }
double gelu_grad_ref(double x) {
  const double u = kGeluK * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluK * (1.0 + 3.0 * 0.044715 * x * x);
}

TEST(Gelu, ForwardAddsBiasAndMatchesNaive) {
  const int N = 9, C = 37;
  Rng rng(21);
  auto pre = rng.vec((size_t)N * C, -6, 6), bias = rng.vec(C);
  pre[0] = -30.0f;  // far tails
  pre[1] = 30.0f;
  pre[2] = -12.0f;
  pre[3] = 0.0f;
  for (bool with_bias : {true, false}) {
    auto p = pre;
    std::vector<float> out((size_t)N * C);
    ms::bias_gelu_forward(out.data(), p.data(), with_bias ? bias.data() : nullptr, N, C);
    std::vector<double> rp((size_t)N * C), ro((size_t)N * C);
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) {
        const size_t k = (size_t)i * C + c;
        rp[k] = (double)(float)(pre[k] + (with_bias ? bias[c] : 0.0f));  // the float sum is exact in the kernel too
        ro[k] = gelu_ref(rp[k]);
      }
    expect_close(p, rp, 0, 0, with_bias ? "pre + bias" : "pre unchanged");
    expect_close(out, ro, 2e-6, 1e-6, with_bias ? "gelu(pre + bias)" : "gelu(pre)");
  }
}

// The bf16-output forward equals the fp32 forward rounded to bf16 (exact RNE), bit for bit, and
// adds the bias into pre the same way.
TEST(Gelu, Bf16OutputIsTheRoundedFp32Output) {
  const int N = 70, C = 3 * 64 + 5;  // several row chunks, a ragged vector tail
  Rng rng(22);
  auto pre = rng.vec((size_t)N * C, -6, 6), bias = rng.vec(C);
  pre[0] = -30.0f;
  pre[1] = 30.0f;
  for (bool with_bias : {true, false}) {
    auto p32 = pre, p16 = pre;
    std::vector<float> out((size_t)N * C);
    std::vector<ms::bf16_t> got((size_t)N * C), want((size_t)N * C);
    ms::bias_gelu_forward(out.data(), p32.data(), with_bias ? bias.data() : nullptr, N, C);
    ms::bias_gelu_forward_bf16(got.data(), p16.data(), with_bias ? bias.data() : nullptr, N, C);
    ms::f32_to_bf16(want.data(), out.data(), out.size(), ms::Bf16Path::kScalar);
    EXPECT_EQ(std::memcmp(p32.data(), p16.data(), p32.size() * sizeof(float)), 0) << "pre differs";
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); i++) bad += got[i] != want[i];
    EXPECT_EQ(bad, 0u) << "bf16 outputs differ from the rounded fp32 outputs";
  }
}

TEST(Gelu, BackwardMatchesNaiveAndAccumulatesBias) {
  const int N = 40, C = 37;  // two 32-row chunks
  Rng rng(22);
  auto pre = rng.vec((size_t)N * C, -6, 6), g = rng.vec((size_t)N * C);
  pre[0] = -30.0f;
  pre[1] = 30.0f;
  auto dbias = rng.vec(C);
  const auto dbias0 = dbias;
  std::vector<float> dpre((size_t)N * C);
  ms::bias_gelu_backward(dpre.data(), dbias.data(), g.data(), pre.data(), N, C);
  std::vector<double> rd((size_t)N * C), rdb(dbias0.begin(), dbias0.end());
  for (int i = 0; i < N; ++i)
    for (int c = 0; c < C; ++c) {
      const size_t k = (size_t)i * C + c;
      rd[k] = g[k] * gelu_grad_ref(pre[k]);
      rdb[c] += rd[k];
    }
  expect_close(dpre, rd, 1e-5, 1e-6, "gelu dpre");
  expect_close(dbias, rdb, 1e-5, 1e-5, "gelu dbias");
  // dbias == nullptr: same dpre.
  std::vector<float> dpre2((size_t)N * C);
  ms::bias_gelu_backward(dpre2.data(), nullptr, g.data(), pre.data(), N, C);
  expect_bitwise_equal(dpre, dpre2, "dpre without dbias");
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  const int N = 4, C = 13;
  Rng rng(23);
  auto pre = rng.vec((size_t)N * C, -4, 4), bias = rng.vec(C), g = rng.vec((size_t)N * C);
  std::vector<float> p = pre, out((size_t)N * C), dpre((size_t)N * C), dbias(C, 0.0f);
  ms::bias_gelu_forward(out.data(), p.data(), bias.data(), N, C);
  ms::bias_gelu_backward(dpre.data(), dbias.data(), g.data(), p.data(), N, C);
  const auto gd = to_double(g);
  auto loss = [&](const std::vector<double>& X, const std::vector<double>& Bv) {
    double s = 0;
    for (int i = 0; i < N; ++i)
      for (int c = 0; c < C; ++c) s += gelu_ref(X[(size_t)i * C + c] + Bv[c]) * gd[(size_t)i * C + c];
    return s;
  };
  const auto xd = to_double(pre), bd = to_double(bias);
  expect_close(dpre, finite_diff(xd, [&](const auto& X) { return loss(X, bd); }), 1e-4, 1e-5, "gelu dpre vs FD");
  expect_close(dbias, finite_diff(bd, [&](const auto& Bv) { return loss(xd, Bv); }), 1e-4, 1e-5, "gelu dbias vs FD");
}

TEST(Gelu, BackwardInPlaceOverDout) {
  const int N = 33, C = 50;
  Rng rng(24);
  auto pre = rng.vec((size_t)N * C, -5, 5), g = rng.vec((size_t)N * C);
  std::vector<float> dpre((size_t)N * C), db1(C, 0.0f), db2(C, 0.0f);
  ms::bias_gelu_backward(dpre.data(), db1.data(), g.data(), pre.data(), N, C);
  auto inplace = g;
  ms::bias_gelu_backward(inplace.data(), db2.data(), inplace.data(), pre.data(), N, C);
  expect_bitwise_equal(dpre, inplace, "dpre aliasing dout");
  expect_bitwise_equal(db1, db2, "dbias with dpre aliasing dout");
}

TEST(Gelu, BitIdenticalAcrossThreadCounts) {
  const int N = 150, C = 200;
  Rng rng(25);
  const auto pre = rng.vec((size_t)N * C, -5, 5), bias = rng.vec(C), g = rng.vec((size_t)N * C);
  auto run = [&](int threads) {
    std::vector<float> p = pre, out((size_t)N * C), dpre((size_t)N * C), db(C, 0.5f);
    with_threads(threads, [&] {
      ms::bias_gelu_forward(out.data(), p.data(), bias.data(), N, C);
      ms::bias_gelu_backward(dpre.data(), db.data(), g.data(), p.data(), N, C);
    });
    return std::vector<std::vector<float>>{p, out, dpre, db};
  };
  const auto r1 = run(1);
  for (int t : {2, 3}) {
    const auto rt = run(t);
    for (size_t k = 0; k < r1.size(); ++k) expect_bitwise_equal(r1[k], rt[k], "gelu output " + std::to_string(k) + " threads=" + std::to_string(t));
  }
}

// ---------------------------------------------------------------- cross-entropy references (double)

// Loss per row and dlogits (N, Vp) of dloss * sum(losses), padded columns 0, ignored rows 0.
void ce_ref(std::vector<double>& losses, std::vector<double>& dlogits, const std::vector<double>& logits,
            const std::vector<int>& targets, int N, int V, int Vp, double dloss) {
  losses.assign(N, 0.0);
  dlogits.assign((size_t)N * Vp, 0.0);
  for (int i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    const double* x = &logits[(size_t)i * Vp];
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, x[j]);
    for (int j = 0; j < V; ++j) s += std::exp(x[j] - mx);
    losses[i] = std::log(s) + mx - x[targets[i]];
    for (int j = 0; j < V; ++j)
      dlogits[(size_t)i * Vp + j] = dloss * (std::exp(x[j] - mx) / s - (j == targets[i] ? 1.0 : 0.0));
  }
}

struct CeCase {
  int N, V, Vp;
  std::vector<float> logits;
  std::vector<int> targets;
};

// Random logits with the padded columns full of garbage (NaN, huge) that must never be read.
CeCase make_ce_case(int N, int V, int Vp, uint64_t seed, float scale = 4.0f) {
  Rng rng(seed);
  CeCase c{N, V, Vp, rng.vec((size_t)N * Vp, -scale, scale), std::vector<int>(N)};
  for (int i = 0; i < N; ++i) {
    for (int j = V; j < Vp; ++j) c.logits[(size_t)i * Vp + j] = (j % 2) ? NAN : 1e30f;
    c.targets[i] = (int)(rng.next() % V);
  }
  c.targets[N / 2] = -1;  // an ignored row
  c.targets[0] = V - 1;   // the last real column
  return c;
}

TEST(CrossEntropy, ForwardBackwardMatchNaiveWithPaddingAndIgnoredRows) {
  for (auto [N, V, Vp] : {std::tuple{9, 37, 40}, std::tuple{5, 3000, 3008}, std::tuple{4, 5, 5}}) {
    auto c = make_ce_case(N, V, Vp, 31 + V);
    const float dloss = 1.0f / N;
    std::vector<float> losses(N), dlogits((size_t)N * Vp, 123.0f);
    ms::softmax_cross_entropy_forward_backward(losses.data(), dlogits.data(), c.logits.data(), c.targets.data(), N, V,
                                               Vp, dloss);
    std::vector<double> rl, rd;
    ce_ref(rl, rd, to_double(c.logits), c.targets, N, V, Vp, dloss);
    const std::string tag = " V=" + std::to_string(V) + " Vp=" + std::to_string(Vp);
    expect_close(losses, rl, 1e-5, 2e-6, "losses" + tag);
    expect_close(dlogits, rd, 1e-5, 1e-8, "dlogits" + tag);
    EXPECT_EQ(losses[N / 2], 0.0f) << "ignored row";
    for (int j = 0; j < Vp; ++j) EXPECT_EQ(dlogits[(size_t)(N / 2) * Vp + j], 0.0f) << "ignored row gradient";
    for (int i = 0; i < N; ++i)
      for (int j = V; j < Vp; ++j) EXPECT_EQ(dlogits[(size_t)i * Vp + j], 0.0f) << "padded column gradient";
    // Forward only: identical losses.
    std::vector<float> losses2(N);
    ms::softmax_cross_entropy_forward_backward(losses2.data(), nullptr, c.logits.data(), c.targets.data(), N, V, Vp,
                                               dloss);
    expect_bitwise_equal(losses, losses2, "losses without dlogits" + tag);
  }
}

// The bf16-gradient variant: the same losses, the fp32 gradient rounded to bf16 (exact RNE), zero
// for ignored rows and padded columns, and the logits left untouched.
TEST(CrossEntropy, Bf16GradientIsTheRoundedFp32Gradient) {
  for (auto [N, V, Vp] : {std::tuple{9, 37, 40}, std::tuple{5, 3000, 3008}, std::tuple{4, 5, 5}}) {
    auto c = make_ce_case(N, V, Vp, 41 + V);
    const float dloss = 1.0f / N;
    std::vector<float> losses(N), losses16(N), dlogits((size_t)N * Vp);
    std::vector<ms::bf16_t> got((size_t)N * Vp, 0x1234), want((size_t)N * Vp);
    const auto logits = c.logits;
    ms::softmax_cross_entropy_forward_backward(losses.data(), dlogits.data(), c.logits.data(), c.targets.data(), N, V,
                                               Vp, dloss);
    ms::softmax_cross_entropy_forward_backward_bf16(losses16.data(), got.data(), c.logits.data(), c.targets.data(), N,
                                                    V, Vp, dloss);
    ms::f32_to_bf16(want.data(), dlogits.data(), dlogits.size(), ms::Bf16Path::kScalar);
    const std::string tag = " V=" + std::to_string(V);
    expect_bitwise_equal(losses, losses16, "losses" + tag);
    expect_bitwise_equal(c.logits, logits, "logits untouched" + tag);
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); i++) bad += got[i] != want[i];
    EXPECT_EQ(bad, 0u) << "bf16 gradient differs from the rounded fp32 gradient" << tag;
  }
}

TEST(CrossEntropy, PaddedColumnsDoNotChangeTheLoss) {
  const int N = 6, V = 50, Vp = 64;
  auto c = make_ce_case(N, V, Vp, 41);
  auto c2 = c;
  for (int i = 0; i < N; ++i)
    for (int j = V; j < Vp; ++j) c2.logits[(size_t)i * Vp + j] = -5.0f + j;  // different padding
  std::vector<float> l1(N), l2(N), d1((size_t)N * Vp), d2((size_t)N * Vp);
  ms::softmax_cross_entropy_forward_backward(l1.data(), d1.data(), c.logits.data(), c.targets.data(), N, V, Vp, 1.0f);
  ms::softmax_cross_entropy_forward_backward(l2.data(), d2.data(), c2.logits.data(), c2.targets.data(), N, V, Vp, 1.0f);
  expect_bitwise_equal(l1, l2, "losses with different padding");
  expect_bitwise_equal(d1, d2, "dlogits with different padding");
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  const int N = 4, V = 7, Vp = 8;
  auto c = make_ce_case(N, V, Vp, 51);
  for (int i = 0; i < N; ++i) c.logits[(size_t)i * Vp + 7] = 0.0f;  // keep FD inputs finite
  const float dloss = 0.37f;
  std::vector<float> losses(N), dlogits((size_t)N * Vp);
  ms::softmax_cross_entropy_forward_backward(losses.data(), dlogits.data(), c.logits.data(), c.targets.data(), N, V, Vp,
                                             dloss);
  auto total = [&](const std::vector<double>& X) {
    std::vector<double> l, d;
    ce_ref(l, d, X, c.targets, N, V, Vp, dloss);
    double s = 0;
    for (double v : l) s += dloss * v;
    return s;
  };
  expect_close(dlogits, finite_diff(to_double(c.logits), total), 1e-4, 1e-6, "dlogits vs FD");
}

TEST(CrossEntropy, InPlaceGradientOverLogits) {
  const int N = 7, V = 1500, Vp = 1536;
  auto c = make_ce_case(N, V, Vp, 61);
  std::vector<float> l1(N), l2(N), d1((size_t)N * Vp);
  ms::softmax_cross_entropy_forward_backward(l1.data(), d1.data(), c.logits.data(), c.targets.data(), N, V, Vp, 0.5f);
  auto inplace = c.logits;
  ms::softmax_cross_entropy_forward_backward(l2.data(), inplace.data(), inplace.data(), c.targets.data(), N, V, Vp, 0.5f);
  expect_bitwise_equal(l1, l2, "losses in place");
  expect_bitwise_equal(d1, inplace, "dlogits in place");
}

TEST(CrossEntropy, StableForLargeLogits) {
  const int N = 3, V = 100, Vp = 100;
  auto c = make_ce_case(N, V, Vp, 71, 30.0f);
  for (int i = 0; i < N; ++i) c.targets[i] = i;
  auto shifted = c.logits;
  for (auto& x : shifted) x += 1000.0f;  // softmax is shift invariant
  std::vector<float> l1(N), l2(N), d1((size_t)N * Vp), d2((size_t)N * Vp);
  ms::softmax_cross_entropy_forward_backward(l1.data(), d1.data(), c.logits.data(), c.targets.data(), N, V, Vp, 1.0f);
  ms::softmax_cross_entropy_forward_backward(l2.data(), d2.data(), shifted.data(), c.targets.data(), N, V, Vp, 1.0f);
  std::vector<double> rl, rd;
  ce_ref(rl, rd, to_double(c.logits), c.targets, N, V, Vp, 1.0);
  expect_close(l1, rl, 1e-5, 1e-5, "losses, logits up to 30");
  // Shifting by 1000 rounds the logits (ulp(1000) = 6e-5), hence the looser tolerance.
  expect_close(l2, rl, 1e-4, 2e-4, "losses, logits shifted by 1000");
  expect_close(d1, rd, 1e-5, 1e-7, "dlogits, logits up to 30");
  expect_close(d2, rd, 1e-3, 1e-5, "dlogits, logits shifted by 1000");
}

TEST(CrossEntropy, RejectsBadTargets) {
  const int N = 2, V = 5, Vp = 8;
  std::vector<float> logits((size_t)N * Vp, 0.0f), losses(N);
  std::vector<int> t1{0, 5}, t2{-2, 0};
  EXPECT_THROW(ms::softmax_cross_entropy_forward_backward(losses.data(), nullptr, logits.data(), t1.data(), N, V, Vp, 1.0f), ms::Error);
  EXPECT_THROW(ms::softmax_cross_entropy_forward_backward(losses.data(), nullptr, logits.data(), t2.data(), N, V, Vp, 1.0f), ms::Error);
}

TEST(CrossEntropy, BitIdenticalAcrossThreadCounts) {
  const int N = 37, V = 2000, Vp = 2048;
  auto c = make_ce_case(N, V, Vp, 81);
  auto run = [&](int threads) {
    std::vector<float> l(N), d((size_t)N * Vp);
    with_threads(threads, [&] {
      ms::softmax_cross_entropy_forward_backward(l.data(), d.data(), c.logits.data(), c.targets.data(), N, V, Vp, 1.0f / N);
    });
    return std::pair{l, d};
  };
  const auto r1 = run(1);
  for (int t : {2, 3}) {
    const auto rt = run(t);
    expect_bitwise_equal(r1.first, rt.first, "losses threads=" + std::to_string(t));
    expect_bitwise_equal(r1.second, rt.second, "dlogits threads=" + std::to_string(t));
  }
}

// Re-runs every other test of this binary with the baseline (non-AVX-512) code path.
TEST(KernelIsa, AllTestsPassOnGenericPath) {
  if (const char* e = std::getenv("MS_KERNEL_ISA"); e && std::string(e) == "generic") GTEST_SKIP() << "already generic";
  const auto r = ms::testing::run_cmd("MS_KERNEL_ISA=generic OMP_NUM_THREADS=2 /proc/" + std::to_string(getpid()) +
                                       "/exe --gtest_filter=-KernelIsa.*");
  EXPECT_EQ(r.code, 0) << "generic-ISA run failed:\n" << r.output;
}

}  // namespace
