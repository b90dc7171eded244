// Tests of the flash-style causal attention (forward and backward) against a naive double-precision
// reference that builds the full TxT score matrix with the causal/window mask, against
// double-precision central finite differences of sum(out * g), and for the properties the model
// relies on: window >= T equals full attention bit for bit, window = 1 gives out = v, dqkv is
// overwritten, results are bit-identical for 1, 2 and 3 OpenMP threads. Sizes cover odd T (partial
// 64-row tiles), several tiles, head size 64 (the register-blocked path) and odd head sizes. The
// last test re-runs this binary with MS_KERNEL_ISA=generic (baseline, non-AVX-512 code path).
// The bf16 kernels (attention_forward_bf16 / attention_backward_bf16, AVX512-BF16 tile products) are
// held to the same references within bf16's error (relative L2 error of each output <= 1e-2, i.e.
// ~2.5 bf16 ulps, where a wrong index or a dropped tile gives O(1)), and to the same exact properties
// (thread-count independence, window >= T == full, scratch hygiene); on the generic path (or a CPU
// without AVX512-BF16) they must equal the fp32 kernels bit for bit.
#include <omp.h>
#include <unistd.h>  // getpid

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention.h"
#include "base/check.h"
#include "base/cpu_features.h"  // cpu_has_avx512_bf16
#include "common/test_util.h"  // ms::testing::run_cmd

namespace {

using Rng = ms::testing::TestRng;
using ms::testing::expect_bitwise_equal;
using ms::testing::expect_close;
using ms::testing::with_threads;

struct Shape {
  int B, T, C, NH, window;
  int NKV = 0;  // key/value heads (0: NH, multi-head attention)
  int kv() const { return NKV > 0 ? NKV : NH; }
  int width() const { return C + 2 * kv() * (C / NH); }  // a packed q|k|v row
  std::string str() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) + " NH=" +
           std::to_string(NH) + " NKV=" + std::to_string(kv()) + " window=" + std::to_string(window);
  }
};

bool attends(int t, int j, int window) { return j <= t && (window == 0 || j > t - window); }

// Naive attention in double with the full score matrix. out (B,T,C), lse (B,NH,T).
// Grouped queries: query head h reads key/value head h / (NH / NKV) (Hugging Face's repeat_kv).
void attention_forward_ref(std::vector<double>& out, std::vector<double>& lse, const std::vector<double>& qkv,
                           const Shape& s) {
  const int HS = s.C / s.NH, C3 = s.width(), r = s.NH / s.kv();
  const double scale = 1.0 / std::sqrt((double)HS);
  out.assign((size_t)s.B * s.T * s.C, 0.0);
  lse.assign((size_t)s.B * s.NH * s.T, 0.0);
  std::vector<double> S(s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const double* q = &qkv[((size_t)b * s.T + t) * C3 + h * HS];
        double mx = -INFINITY;
        for (int j = 0; j < s.T; ++j) {
          S[j] = -INFINITY;
          if (!attends(t, j, s.window)) continue;
          const double* k = &qkv[((size_t)b * s.T + j) * C3 + s.C + (h / r) * HS];
          double d = 0;
          for (int x = 0; x < HS; ++x) d += q[x] * k[x];
          S[j] = d * scale;
          mx = std::max(mx, S[j]);
        }
        double sum = 0;
        for (int j = 0; j < s.T; ++j) sum += attends(t, j, s.window) ? std::exp(S[j] - mx) : 0.0;
        double* o = &out[((size_t)b * s.T + t) * s.C + h * HS];
        for (int j = 0; j < s.T; ++j) {
          if (!attends(t, j, s.window)) continue;
          const double p = std::exp(S[j] - mx) / sum;
          const double* v = &qkv[((size_t)b * s.T + j) * C3 + s.C + (s.kv() + h / r) * HS];
          for (int x = 0; x < HS; ++x) o[x] += p * v[x];
        }
        lse[((size_t)b * s.NH + h) * s.T + t] = mx + std::log(sum);
      }
}

// Naive analytic gradient of sum(out * dout) wrt qkv, in double.
void attention_backward_ref(std::vector<double>& dqkv, const std::vector<double>& dout, const std::vector<double>& qkv,
                            const Shape& s) {
  const int HS = s.C / s.NH, C3 = s.width(), r = s.NH / s.kv();
  const double scale = 1.0 / std::sqrt((double)HS);
  dqkv.assign((size_t)s.B * s.T * C3, 0.0);
  std::vector<double> P(s.T), dP(s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        auto q = [&](int i) { return &qkv[((size_t)b * s.T + i) * C3 + h * HS]; };
        const int kofs = s.C + (h / r) * HS, vofs = s.C + (s.kv() + h / r) * HS, ofs[3] = {h * HS, kofs, vofs};
        auto k = [&](int i) { return &qkv[((size_t)b * s.T + i) * C3 + kofs]; };
        auto v = [&](int i) { return &qkv[((size_t)b * s.T + i) * C3 + vofs]; };
        auto d = [&](int i, int part) { return &dqkv[((size_t)b * s.T + i) * C3 + ofs[part]]; };
        const double* g = &dout[((size_t)b * s.T + t) * s.C + h * HS];
        double mx = -INFINITY;
        for (int j = 0; j < s.T; ++j) {
          P[j] = -INFINITY;
          if (!attends(t, j, s.window)) continue;
          double dot = 0;
          for (int x = 0; x < HS; ++x) dot += q(t)[x] * k(j)[x];
          P[j] = dot * scale;
          mx = std::max(mx, P[j]);
        }
        double sum = 0;
        for (int j = 0; j < s.T; ++j) {
          P[j] = attends(t, j, s.window) ? std::exp(P[j] - mx) : 0.0;
          sum += P[j];
        }
        double pdp = 0;
        for (int j = 0; j < s.T; ++j) {
          P[j] /= sum;
          dP[j] = 0;
          for (int x = 0; x < HS; ++x) dP[j] += g[x] * v(j)[x];
          pdp += P[j] * dP[j];
        }
        for (int j = 0; j < s.T; ++j) {
          if (!attends(t, j, s.window)) continue;
          const double dS = P[j] * (dP[j] - pdp);
          for (int x = 0; x < HS; ++x) {
            d(t, 0)[x] += scale * dS * k(j)[x];
            d(j, 1)[x] += scale * dS * q(t)[x];
            d(j, 2)[x] += P[j] * g[x];
          }
        }
      }
}

struct AttnResult {
  std::vector<float> out, lse, dqkv;
};

// Runs the kernels; dqkv starts full of NaN to check that it is overwritten.
// bf16: the bf16 kernels instead of the fp32 ones.
AttnResult run_kernels(const std::vector<float>& qkv, const std::vector<float>& dout, const Shape& s,
                       bool bf16 = false) {
  AttnResult r{std::vector<float>((size_t)s.B * s.T * s.C), std::vector<float>((size_t)s.B * s.NH * s.T),
        std::vector<float>((size_t)s.B * s.T * s.width(), NAN)};
  (bf16 ? ms::attention_forward_bf16 : ms::attention_forward)(r.out.data(), r.lse.data(), qkv.data(), s.B, s.T,
                                                              s.C, s.NH, s.kv(), s.window);
  (bf16 ? ms::attention_backward_bf16 : ms::attention_backward)(r.dqkv.data(), dout.data(), qkv.data(),
                                                                r.out.data(), r.lse.data(), s.B, s.T, s.C, s.NH,
                                                                s.kv(), s.window);
  return r;
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// ||got - ref|| / ||ref|| (L2 over every element); a NaN anywhere gives NaN (fails any bound).
double relative_l2_error(const std::vector<float>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
  return std::sqrt(num / std::max(den, 1e-300));
}

// The bf16 kernels against the double reference: relative L2 error of out and dqkv <= 1e-2, lse
// within 1e-2 absolute or relative. Rounding q and k to bf16 moves each score by ~2^-8 of its size,
// so with scores in the hundreds (qk_range 6) the bounds grow with qk_range / 2.
void check_bf16_against_reference(const Shape& s, uint64_t seed, float qk_range = 1.0f) {
  Rng rng(seed);
  auto qkv = rng.vec((size_t)s.B * s.T * s.width());
  for (size_t r = 0; r < (size_t)s.B * s.T; ++r)  // queries and keys
    for (int c = 0; c < s.C + s.kv() * (s.C / s.NH); ++c) qkv[r * s.width() + c] *= qk_range;
  const auto dout = rng.vec((size_t)s.B * s.T * s.C);
  const AttnResult r = run_kernels(qkv, dout, s, /*bf16=*/true);
  std::vector<double> out, lse, dqkv;
  attention_forward_ref(out, lse, to_double(qkv), s);
  attention_backward_ref(dqkv, to_double(dout), to_double(qkv), s);
  const double tol = 1e-2 * std::max(1.0f, qk_range / 2);
  EXPECT_LE(relative_l2_error(r.out, out), tol) << "bf16 out " << s.str();
  EXPECT_LE(relative_l2_error(r.dqkv, dqkv), tol) << "bf16 dqkv " << s.str();
  expect_close(r.lse, lse, tol, tol, "bf16 lse " + s.str());
}

void check_against_reference(const Shape& s, uint64_t seed, float qk_range = 1.0f) {
  check_bf16_against_reference(s, seed, qk_range);
  Rng rng(seed);
  auto qkv = rng.vec((size_t)s.B * s.T * s.width());
  // Scale q and k so that scores span a wide range (exercises the online-softmax rescaling).
  for (size_t r = 0; r < (size_t)s.B * s.T; ++r)
    for (int c = 0; c < s.C + s.kv() * (s.C / s.NH); ++c) qkv[r * s.width() + c] *= qk_range;
  const auto dout = rng.vec((size_t)s.B * s.T * s.C);
  const AttnResult r = run_kernels(qkv, dout, s);
  std::vector<double> out, lse, dqkv;
  attention_forward_ref(out, lse, to_double(qkv), s);
  attention_backward_ref(dqkv, to_double(dout), to_double(qkv), s);
  expect_close(r.out, out, 1e-5, 1e-5, "out " + s.str());
  expect_close(r.lse, lse, 1e-5, 1e-5, "lse " + s.str());
  expect_close(r.dqkv, dqkv, 1e-4, 2e-5 * qk_range, "dqkv " + s.str());
}

TEST(Attention, OddSizesMatchNaiveReference) {
  // T=37 is a single partial tile, HS=16 takes the edge path of the micro-kernel.
  for (int w : {0, 1, 5, 36, 37, 100}) check_against_reference({2, 37, 48, 3, w}, 100 + w);
}

TEST(Attention, SeveralTilesMatchNaiveReference) {
  // T=150: tiles of 64, 64, 22 rows; windows around the tile size (W = 2 mod 64 puts the first
  // key a query tile needs on the last row of a key tile, W = 66 for T=150 exercises it).
  for (int w : {0, 1, 2, 7, 63, 64, 65, 66, 130, 150}) check_against_reference({1, 150, 40, 2, w}, 200 + w);
}

TEST(Attention, HeadSize64MatchesNaiveReference) {
  // HS=64, the GPT-2 head size: the register-blocked micro-kernel path.
  for (int w : {0, 3, 100}) check_against_reference({1, 131, 128, 2, w}, 300 + w);
}

TEST(Attention, LargeScoresAreStable) {
  // Scores of magnitude ~100s: the running max changes between key tiles.
  for (int w : {0, 50}) check_against_reference({1, 140, 64, 2, w}, 400 + w, 6.0f);
}

// dqkv against central finite differences of sum(out * dout) through the naive forward.
void check_backward_fd(const Shape& s, uint64_t seed) {
  Rng rng(seed);
  const auto qkv = rng.vec((size_t)s.B * s.T * s.width()), dout = rng.vec((size_t)s.B * s.T * s.C);
  const AttnResult r = run_kernels(qkv, dout, s);
  const auto g = to_double(dout);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> out, lse;
    attention_forward_ref(out, lse, x, s);
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += out[i] * g[i];
    return sum;
  };
  expect_close(r.dqkv, ms::testing::finite_diff(to_double(qkv), loss), 1e-4, 1e-5,
               "dqkv vs finite differences " + s.str());
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  for (int w : {0, 3}) check_backward_fd({2, 9, 8, 2, w}, 500 + w);
}

TEST(Attention, WindowAtLeastTEqualsFullBitwise) {
  const int B = 2, T = 70, C = 32, NH = 2;
  Rng rng(600);
  const auto qkv = rng.vec((size_t)B * T * 3 * C), dout = rng.vec((size_t)B * T * C);
  for (bool bf16 : {false, true}) {
  const AttnResult full = run_kernels(qkv, dout, {B, T, C, NH, 0}, bf16);
  for (int w : {T, T + 1, 1000}) {
    const AttnResult r = run_kernels(qkv, dout, {B, T, C, NH, w}, bf16);
    expect_bitwise_equal(full.out, r.out, "out window=" + std::to_string(w) + (bf16 ? " bf16" : ""));
    expect_bitwise_equal(full.lse, r.lse, "lse window=" + std::to_string(w));
    expect_bitwise_equal(full.dqkv, r.dqkv, "dqkv window=" + std::to_string(w));
  }
  }
}

TEST(Attention, WindowOneAttendsOnlyItself) {
  const Shape s{2, 67, 48, 3, 1};
  const int HS = s.C / s.NH;
  Rng rng(700);
  const auto qkv = rng.vec((size_t)s.B * s.T * 3 * s.C), dout = rng.vec((size_t)s.B * s.T * s.C);
  const AttnResult r = run_kernels(qkv, dout, s);
  size_t bad_out = 0, bad_dv = 0, bad_dqk = 0;
  for (int bt = 0; bt < s.B * s.T; ++bt)
    for (int c = 0; c < s.C; ++c) {
      const float* row = &qkv[(size_t)bt * 3 * s.C];
      const float* drow = &r.dqkv[(size_t)bt * 3 * s.C];
      const float g = dout[(size_t)bt * s.C + c];
      bad_out += r.out[(size_t)bt * s.C + c] != row[2 * s.C + c];  // out == v exactly
      bad_dv += drow[2 * s.C + c] != g;                            // dv == dout exactly
      // dq, dk: mathematically 0 (softmax over one key); numerically D_i and dP_ii are the same
      // dot product summed in different orders.
      bad_dqk += std::fabs(drow[c]) > 1e-6f || std::fabs(drow[s.C + c]) > 1e-6f;
    }
  EXPECT_EQ(bad_out, 0u) << "out != v";
  EXPECT_EQ(bad_dv, 0u) << "dv != dout";
  EXPECT_EQ(bad_dqk, 0u) << "dq or dk not ~0";
  // lse = the single scaled score q.k / sqrt(HS).
  std::vector<double> lse((size_t)s.B * s.NH * s.T);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int t = 0; t < s.T; ++t) {
        const float* row = &qkv[((size_t)b * s.T + t) * 3 * s.C];
        double d = 0;
        for (int x = 0; x < HS; ++x) d += (double)row[h * HS + x] * row[s.C + h * HS + x];
        lse[((size_t)b * s.NH + h) * s.T + t] = d / std::sqrt((double)HS);
      }
  expect_close(r.lse, lse, 1e-5, 1e-6, "lse window=1");
}

TEST(Attention, BitIdenticalAcrossThreadCounts) {
  for (int w : {0, 40})
    for (bool bf16 : {false, true}) {
    const Shape s{2, 150, 128, 2, w};
    Rng rng(800 + w);
    const auto qkv = rng.vec((size_t)s.B * s.T * 3 * s.C), dout = rng.vec((size_t)s.B * s.T * s.C);
    AttnResult r1, rt;
    with_threads(1, [&] { r1 = run_kernels(qkv, dout, s, bf16); });
    for (int t : {2, 3}) {
      with_threads(t, [&] { rt = run_kernels(qkv, dout, s, bf16); });
      const std::string tag = s.str() + " threads=" + std::to_string(t) + (bf16 ? " bf16" : " fp32");
      expect_bitwise_equal(r1.out, rt.out, "out " + tag);
      expect_bitwise_equal(r1.lse, rt.lse, "lse " + tag);
      expect_bitwise_equal(r1.dqkv, rt.dqkv, "dqkv " + tag);
    }
  }
}

TEST(Attention, NanInputsDoNotLeakIntoLaterCalls) {
  // Per-thread scratch is reused across calls; padded tile rows must be cleared, not inherited.
  const Shape s{1, 37, 48, 3, 0};
  with_threads(1, [&] {
    const std::vector<float> nan_qkv((size_t)s.B * s.T * 3 * s.C, NAN), nan_dout((size_t)s.B * s.T * s.C, NAN);
    run_kernels(nan_qkv, nan_dout, s);
    check_against_reference(s, 900);
    run_kernels(nan_qkv, nan_dout, s, /*bf16=*/true);
    check_bf16_against_reference(s, 901);
  });
}

// Grouped-query and multi-query attention (NKV < NH key/value heads) against the naive reference
// (which expands the kv heads), fp32 and bf16, full and sliding, odd T and several tiles.
TEST(Attention, GroupedQueriesMatchNaiveReference) {
  for (int nkv : {1, 2, 4})
    for (int w : {0, 5, 70}) {
      Shape s{2, 75, 64, 8, w};
      s.NKV = nkv;
      check_against_reference(s, 1000 + 10 * nkv + w);
    }
  Shape big{1, 150, 128, 2, 0};  // HS = 64, the register-blocked path; multi-query
  big.NKV = 1;
  check_against_reference(big, 1100, 6.0f);
}

TEST(Attention, GroupedQueriesBackwardMatchesFiniteDifferences) {
  for (int w : {0, 3}) {
    Shape s{1, 9, 8, 4, w};
    s.NKV = 2;
    check_backward_fd(s, 1200 + w);
  }
}

// The grouped kernels against the multi-head kernels on the same inputs with each kv head copied to
// its query heads: out, lse and dq bit for bit (the same arithmetic per head), dk and dv the sums of
// the copies' gradients (fp32 association: 1e-6 relative); and independent of the thread count.
TEST(Attention, GroupedQueriesAreMultiHeadOnCopiedKeysAndValues) {
  for (bool bf16 : {false, true}) {
    Shape g{2, 130, 64, 8, 40};
    g.NKV = 2;
    const Shape m{g.B, g.T, g.C, g.NH, g.window};
    const int HS = g.C / g.NH, r = g.NH / g.NKV;
    Rng rng(1300);
    const auto qkv = rng.vec((size_t)g.B * g.T * g.width()), dout = rng.vec((size_t)g.B * g.T * g.C);
    std::vector<float> wide((size_t)m.B * m.T * m.width());
    for (int bt = 0; bt < g.B * g.T; ++bt) {
      const float* src = &qkv[(size_t)bt * g.width()];
      float* dst = &wide[(size_t)bt * m.width()];
      std::copy(src, src + g.C, dst);
      for (int h = 0; h < g.NH; ++h)
        for (int part = 1; part <= 2; ++part)
          std::copy_n(src + g.C + ((part - 1) * g.NKV + h / r) * HS, HS, dst + part * g.C + h * HS);
    }
    AttnResult a, b;
    with_threads(2, [&] { a = run_kernels(qkv, dout, g, bf16); });
    with_threads(2, [&] { b = run_kernels(wide, dout, m, bf16); });
    const std::string tag = bf16 ? " bf16" : " fp32";
    expect_bitwise_equal(a.out, b.out, "out" + tag);
    expect_bitwise_equal(a.lse, b.lse, "lse" + tag);
    std::vector<float> dq_a, dq_b;
    std::vector<double> dkv_sum, dkv_got;
    for (int bt = 0; bt < g.B * g.T; ++bt) {
      dq_a.insert(dq_a.end(), &a.dqkv[(size_t)bt * g.width()], &a.dqkv[(size_t)bt * g.width()] + g.C);
      dq_b.insert(dq_b.end(), &b.dqkv[(size_t)bt * m.width()], &b.dqkv[(size_t)bt * m.width()] + g.C);
      for (int part = 1; part <= 2; ++part)
        for (int kvh = 0; kvh < g.NKV; ++kvh)
          for (int x = 0; x < HS; ++x) {
            double sum = 0;
            for (int h = kvh * r; h < (kvh + 1) * r; ++h) sum += b.dqkv[(size_t)bt * m.width() + part * g.C + h * HS + x];
            dkv_sum.push_back(sum);
            dkv_got.push_back(a.dqkv[(size_t)bt * g.width() + g.C + ((part - 1) * g.NKV + kvh) * HS + x]);
          }
    }
    expect_bitwise_equal(dq_a, dq_b, "dq" + tag);
    expect_close(std::vector<float>(dkv_got.begin(), dkv_got.end()), dkv_sum, 1e-6, 1e-6, "dk, dv" + tag);
    AttnResult one;
    with_threads(1, [&] { one = run_kernels(qkv, dout, g, bf16); });
    expect_bitwise_equal(a.dqkv, one.dqkv, "dqkv threads 1 vs 2" + tag);
  }
}

TEST(Attention, RejectsBadShapes) {
  std::vector<float> buf(3 * 64 * 64, 0.0f), lse(64);
  EXPECT_THROW(ms::attention_forward(buf.data(), lse.data(), buf.data(), 1, 4, 10, 3, 3, 0), ms::Error);  // C % NH
  EXPECT_THROW(ms::attention_forward(buf.data(), lse.data(), buf.data(), 1, 4, 12, 3, 3, -1), ms::Error);  // window
  EXPECT_THROW(ms::attention_forward(buf.data(), lse.data(), buf.data(), 1, 4, 12, 3, 2, 0), ms::Error);  // NH % NKV
  EXPECT_THROW(ms::attention_backward(buf.data(), buf.data(), buf.data(), buf.data(), lse.data(), 1, 4, 12, 4, 0, 0),
               ms::Error);  // NKV = 0
}

TEST(AttentionBf16, RunsOnTheDotProductUnitsWhenPresent) {
  const char* isa = std::getenv("MS_KERNEL_ISA");
  const bool generic = isa && std::string(isa) == "generic";
  EXPECT_EQ(ms::attention_bf16_on_dot_product_units(), ms::cpu_has_avx512_bf16() && !generic);
}

TEST(AttentionBf16, FallsBackToFp32BitwiseWithoutBf16Units) {
  if (ms::attention_bf16_on_dot_product_units()) {
    // This CPU's bf16 units are in use: the fallback is checked by this same test re-run on the
    // generic code path, where they are not (it must run there, not skip).
    const char* isa = std::getenv("MS_KERNEL_ISA");
    ASSERT_FALSE(isa && std::string(isa) == "generic") << "the generic code path still uses the bf16 units";
    const auto r = ms::testing::run_cmd("MS_KERNEL_ISA=generic OMP_NUM_THREADS=2 /proc/" + std::to_string(getpid()) +
                                        "/exe --gtest_filter=AttentionBf16.FallsBackToFp32BitwiseWithoutBf16Units");
    EXPECT_EQ(r.code, 0) << "generic-path run failed:\n" << r.output;
    EXPECT_NE(r.output.find("[  PASSED  ] 1 test"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("SKIPPED"), std::string::npos) << "the generic path skipped it too:\n" << r.output;
    return;
  }
  const Shape s{2, 70, 96, 3, 17};
  Rng rng(1000);
  const auto qkv = rng.vec((size_t)s.B * s.T * 3 * s.C), dout = rng.vec((size_t)s.B * s.T * s.C);
  const AttnResult f = run_kernels(qkv, dout, s), b = run_kernels(qkv, dout, s, true);
  expect_bitwise_equal(f.out, b.out, "out");
  expect_bitwise_equal(f.lse, b.lse, "lse");
  expect_bitwise_equal(f.dqkv, b.dqkv, "dqkv");
}

TEST(AttentionBf16, GPT2HeadsAtT256MatchReference) {
  // The benchmark's shape per head (HS=64, 4 full tiles), full and a window crossing tiles.
  for (int w : {0, 100}) check_bf16_against_reference({1, 256, 128, 2, w}, 1100 + w);
}

// Re-runs every other test of this binary with the baseline (non-AVX-512) code path.
TEST(AttentionIsa, AllTestsPassOnGenericPath) {
  if (const char* e = std::getenv("MS_KERNEL_ISA"); e && std::string(e) == "generic") GTEST_SKIP() << "already generic";
  const auto r = ms::testing::run_cmd("MS_KERNEL_ISA=generic OMP_NUM_THREADS=2 /proc/" + std::to_string(getpid()) +
                                       "/exe --gtest_filter=-AttentionIsa.*");
  EXPECT_EQ(r.code, 0) << "generic-ISA run failed:\n" << r.output;
}

}  // namespace
