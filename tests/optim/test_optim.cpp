// Optimizer components against independent references:
// - AdamW: 5 steps vs torch.optim.AdamW (two param groups, varying lr), params/m/v within 1e-6
//   relative (+1e-9 absolute); in practice bit-exact on torch's AVX2 CPU kernels.
// - LAMB: vs the paper's formula in double written here (per-tensor loop), several steps, with the
//   ||p|| = 0 and ||r|| = 0 guards, the max_trust clamp, no-decay tensors and bias correction off;
//   params 2e-6 relative to the tensor's max |p|, m and v 1e-6 relative (m also 1e-8 absolute, as
//   it cancels; gradients are ~0.1). Sharded (2 slices per tensor, partial sums added) vs
//   unsharded: bit-identical.
// - Gradient norm vs a naive double sum (1e-12 relative); clipping vs torch.nn.utils.clip_grad_norm_
//   (1e-6 relative); clip_scale, all_finite, scale_inplace and the lr schedule vs closed forms.
// - Determinism: 1 vs 2 OpenMP threads, and AVX2 vs scalar kernels, bit-identical.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "optim/adamw.h"
#include "optim/optim_simd.h"  // optim_simd_active
#include "optim/work_split.h"  // optim_detail::split_point, num_blocks
#include "base/bf16.h"
#include "kernels/bf16_convert.h"
#include "base/check.h"
#include "optim/grad_norm.h"
#include "optim/lamb.h"
#include "optim/lr_schedule.h"
#include "base/rng.h"
#include "common/test_util.h"

namespace ms {
namespace {

using Layout = std::vector<ParamTensor>;

Layout make_layout(const std::vector<std::pair<size_t, bool>>& sizes) {
  Layout l;
  size_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    l.push_back(ParamTensor{fmt::format("t{}", i), off, sizes[i].first, sizes[i].second});
    off += sizes[i].first;
  }
  return l;
}
size_t layout_numel(const Layout& l) { return l.empty() ? 0 : l.back().offset + l.back().numel; }

std::vector<float> random_vec(size_t n, double scale, uint64_t seed, uint64_t stream) {
  Rng r(seed, stream);
  std::vector<float> x(n);
  for (auto& e : x) e = static_cast<float>(scale * r.normal());
  return x;
}

void write_f32(const std::string& path, const std::vector<float>& x) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  MS_CHECK(f.good(), "cannot write {}", path);
}
std::vector<float> read_f32(const std::string& path, size_t n) {
  MS_CHECK(std::filesystem::exists(path) && std::filesystem::file_size(path) == n * sizeof(float),
           "{} missing or not {} floats", path, n);
  std::vector<float> x(n);
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(n * sizeof(float)));
  return x;
}
// A float as a Python literal that parses back to exactly the same value.
std::string pyf(float x) { return fmt::format("{:.17g}", static_cast<double>(x)); }

// Runs `script` with /usr/bin/python3 on `dir`; false (test skipped) when torch is unavailable.
bool run_python(const std::string& dir, const std::string& script) {
  if (!std::filesystem::exists(testing::torch_python())) return false;
  { std::ofstream(dir + "/ref.py") << script; }
  auto r = testing::run_cmd(fmt::format("{} {}/ref.py {}", testing::torch_python(), dir, dir));
  if (r.code == 77) return false;
  EXPECT_EQ(r.code, 0) << r.output;
  return r.code == 0;
}

// |a - b| <= rtol*|b| + atol for all elements; prints the worst one.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  size_t worst = 0, exact = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    exact += (a[i] == b[i]);
    const double excess = d / (rtol * std::fabs(double(b[i])) + atol);
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  EXPECT_LE(worst_excess, 1.0) << what << ": worst at " << worst << " got " << a[worst] << " want " << b[worst];
  std::printf("  %-22s %zu/%zu bit-exact, worst |d|/(rtol|b|+atol) = %.3g\n", what.c_str(), exact, a.size(),
              worst_excess);
}

// ---------------------------------------------------------------------------------------- AdamW

const char* kAdamScript = R"PY(
import sys
try:
    import numpy as np, torch
except ImportError:
    sys.exit(77)
torch.set_num_threads(1)
d = sys.argv[1]
lines = open(d + '/meta.txt').read().split('\n')
steps, total = int(lines[0].split()[0]), int(lines[0].split()[1])
b1, b2, eps, wd = (float(x) for x in lines[1].split())
lrs = [float(x) for x in lines[2].split()]
tens = [(int(a), int(b), int(c)) for a, b, c in (l.split() for l in lines[3:] if l.strip())]
p0 = np.fromfile(d + '/params.bin', dtype=np.float32)
g = np.fromfile(d + '/grads.bin', dtype=np.float32).reshape(steps, total)
ps = [torch.nn.Parameter(torch.from_numpy(p0[o:o + n].copy())) for o, n, _ in tens]
groups = [{'params': [p for p, t in zip(ps, tens) if t[2]], 'weight_decay': wd},
          {'params': [p for p, t in zip(ps, tens) if not t[2]], 'weight_decay': 0.0}]
opt = torch.optim.AdamW(groups, lr=lrs[0], betas=(b1, b2), eps=eps)
for s in range(steps):
    for gr in opt.param_groups:
        gr['lr'] = lrs[s]
    for p, (o, n, _) in zip(ps, tens):
        p.grad = torch.from_numpy(g[s, o:o + n].copy())
    opt.step()
def dump(name, f):
    np.concatenate([f(p).detach().numpy().astype(np.float32) for p in ps]).tofile(d + '/' + name)
dump('p_out.bin', lambda p: p)
dump('m_out.bin', lambda p: opt.state[p]['exp_avg'])
dump('v_out.bin', lambda p: opt.state[p]['exp_avg_sq'])
)PY";

TEST(AdamW, MatchesTorchAdamW) {
  const Layout L = make_layout({{1000, true}, {37, false}, {40000, true}, {19, false}, {5003, true}});
  const size_t N = layout_numel(L);
  const int steps = 5;
  const AdamHyper h{0.9f, 0.95f, 1e-8f, 0.1f};
  const std::vector<float> lrs = {1e-2f, 3e-2f, 2e-2f, 5e-3f, 1e-3f};
  std::vector<float> p = random_vec(N, 1.0, 7, 0), m(N, 0.f), v(N, 0.f);
  std::vector<float> g;
  for (int s = 0; s < steps; ++s) {
    auto gs = random_vec(N, 0.1, 7, 1 + s);
    g.insert(g.end(), gs.begin(), gs.end());
  }
  const std::string dir = testing::make_temp_dir("optim_adamw");
  ASSERT_FALSE(dir.empty());
  write_f32(dir + "/params.bin", p);
  write_f32(dir + "/grads.bin", g);
  {
    std::ofstream f(dir + "/meta.txt");
    f << steps << " " << N << "\n" << pyf(h.beta1) << " " << pyf(h.beta2) << " " << pyf(h.eps) << " "
      << pyf(h.weight_decay) << "\n";
    for (float lr : lrs) f << pyf(lr) << " ";
    f << "\n";
    for (const auto& t : L) f << t.offset << " " << t.numel << " " << int(t.decay) << "\n";
  }
  for (int s = 0; s < steps; ++s) adamw_update(p.data(), g.data() + s * N, m.data(), v.data(), L, lrs[s], s + 1, h);
  if (!run_python(dir, kAdamScript)) {
    std::filesystem::remove_all(dir);
    if (!HasFailure()) MS_SKIP_OR_FAIL_IN_CI("no /usr/bin/python3 with torch");
    return;
  }
  expect_close(p, read_f32(dir + "/p_out.bin", N), 1e-6, 1e-9, "adamw params");
  expect_close(m, read_f32(dir + "/m_out.bin", N), 1e-6, 1e-9, "adamw exp_avg");
  expect_close(v, read_f32(dir + "/v_out.bin", N), 1e-6, 1e-12, "adamw exp_avg_sq");
  std::filesystem::remove_all(dir);
}

// ----------------------------------------------------------------------------------------- LAMB

// The paper's algorithm in double, one tensor at a time.
struct LambRef {
  std::vector<double> p, m, v;
  bool hit_w0 = false, hit_r0 = false, hit_clamp = false;

  void step(const float* g, const Layout& L, double lr, int t, const LambHyper& h) {
    const double b1 = h.adam.beta1, b2 = h.adam.beta2, eps = h.adam.eps, wd = h.adam.weight_decay;
    const double bc1 = h.bias_correction ? 1 - std::pow(b1, t) : 1.0;
    const double bc2 = h.bias_correction ? 1 - std::pow(b2, t) : 1.0;
    for (const auto& T : L) {
      std::vector<double> r(T.numel);
      double wn = 0, rn = 0;
      for (size_t j = 0; j < T.numel; ++j) {
        const size_t k = T.offset + j;
        m[k] = b1 * m[k] + (1 - b1) * g[k];
        v[k] = b2 * v[k] + (1 - b2) * double(g[k]) * g[k];
        r[j] = (m[k] / bc1) / (std::sqrt(v[k] / bc2) + eps) + (T.decay ? wd * p[k] : 0.0);
        wn += p[k] * p[k];
        rn += r[j] * r[j];
      }
      wn = std::sqrt(wn);
      rn = std::sqrt(rn);
      double trust = wn / rn;
      if (wn == 0) hit_w0 = true, trust = 1;
      if (rn == 0) hit_r0 = true, trust = 1;
      if (h.max_trust > 0 && trust > h.max_trust) hit_clamp = true, trust = h.max_trust;
      for (size_t j = 0; j < T.numel; ++j) p[T.offset + j] -= lr * trust * r[j];
    }
  }
};

std::vector<float> to_f(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

// Tensors: random decay, no-decay bias, zero-initialised (||p|| = 0 at step 1), zero-gradient
// no-decay (||r|| = 0), zero-gradient decay (trust = 1/wd), a multi-block one.
struct LambCase {
  Layout L = make_layout({{5000, true}, {37, false}, {300, true}, {64, false}, {50, true}, {40001, true}});
  size_t N = layout_numel(L);
  std::vector<float> p0, grads;  // grads: steps x N
  int steps = 5;
  LambCase() {
    p0 = random_vec(N, 0.5, 11, 0);
    for (size_t k = L[2].offset; k < L[2].offset + L[2].numel; ++k) p0[k] = 0.f;
    for (int s = 0; s < steps; ++s) {
      auto gs = random_vec(N, 0.1, 11, 1 + s);
      for (int z : {3, 4})
        for (size_t k = L[z].offset; k < L[z].offset + L[z].numel; ++k) gs[k] = 0.f;
      grads.insert(grads.end(), gs.begin(), gs.end());
    }
  }
  float lr(int s) const { return 0.01f * float(s + 1); }
};

void check_lamb_vs_ref(const LambHyper& h, bool expect_clamp) {
  LambCase c;
  const size_t N = c.N;
  std::vector<float> p = c.p0, m(N, 0.f), v(N, 0.f), u(N, 0.f);
  LambRef ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(N, 0), std::vector<double>(N, 0)};
  for (int s = 0; s < c.steps; ++s) {
    lamb_update(p.data(), c.grads.data() + s * N, m.data(), v.data(), u.data(), c.L, c.lr(s), s + 1, h);
    ref.step(c.grads.data() + s * N, c.L, c.lr(s), s + 1, h);
  }
  EXPECT_TRUE(ref.hit_w0) << "||p|| = 0 guard not exercised";
  EXPECT_TRUE(ref.hit_r0) << "||r|| = 0 guard not exercised";
  EXPECT_EQ(ref.hit_clamp, expect_clamp) << "max_trust clamp";
  for (const auto& T : c.L) {
    std::vector<float> pt(p.begin() + T.offset, p.begin() + T.offset + T.numel);
    std::vector<float> rt(ref.p.begin() + T.offset, ref.p.begin() + T.offset + T.numel);
    double scale = 0;
    for (float x : rt) scale = std::max(scale, double(std::fabs(x)));
    expect_close(pt, rt, 0.0, 2e-6 * scale + 1e-30, "lamb params " + T.name);
  }
  expect_close(m, to_f(ref.m), 1e-6, 1e-8, "lamb m");  // m cancels: absolute 1e-7 of the grad scale 0.1
  expect_close(v, to_f(ref.v), 1e-6, 1e-15, "lamb v");
  // Zero-gradient no-decay tensor: r = 0, unchanged. Zero-gradient decay tensor: r = wd*p, trust
  // = 1/wd (if not clamped), so p *= (1 - lr) each step.
  for (size_t k = c.L[3].offset; k < c.L[3].offset + c.L[3].numel; ++k) EXPECT_EQ(p[k], c.p0[k]);
  if (h.max_trust == 0) {
    double f = 1;
    for (int s = 0; s < c.steps; ++s) f *= 1 - double(c.lr(s));
    const size_t k = c.L[4].offset;
    EXPECT_NEAR(p[k], c.p0[k] * f, 1e-6 * std::fabs(c.p0[k]));
  }
}

TEST(Lamb, TrustRatioClosedForm) {
  EXPECT_EQ(lamb_trust_ratio(3.0, 4.0, 0.f), 0.75f);
  EXPECT_EQ(lamb_trust_ratio(0.0, 5.0, 0.f), 1.f);  // ||p|| = 0
  EXPECT_EQ(lamb_trust_ratio(5.0, 0.0, 0.f), 1.f);  // ||r|| = 0
  EXPECT_EQ(lamb_trust_ratio(0.0, 0.0, 0.f), 1.f);
  EXPECT_EQ(lamb_trust_ratio(10.0, 1.0, 2.f), 2.f);   // clamped
  EXPECT_EQ(lamb_trust_ratio(1.0, 10.0, 2.f), 0.1f);  // under the clamp
  EXPECT_EQ(lamb_trust_ratio(0.0, 1.0, 0.5f), 0.5f);  // guard value 1 is clamped too
}

TEST(Lamb, MatchesPaperFormula) {
  LambHyper h{AdamHyper{0.9f, 0.999f, 1e-6f, 0.1f}, 0.f, true};
  check_lamb_vs_ref(h, false);
}
TEST(Lamb, MatchesPaperFormulaWithClamp) {
  LambHyper h{AdamHyper{0.9f, 0.999f, 1e-6f, 0.1f}, 0.6f, true};  // trust ~1 for most, 10 for t4
  check_lamb_vs_ref(h, true);
}
TEST(Lamb, MatchesPaperFormulaNoBiasCorrection) {
  LambHyper h{AdamHyper{0.8f, 0.95f, 1e-8f, 0.01f}, 0.f, false};
  check_lamb_vs_ref(h, false);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Lamb, TwoPhasesAndShardedEqualUnsharded) {
  LambCase c;
  const size_t N = c.N, NT = c.L.size();
  const LambHyper h{AdamHyper{}, 5.f, true};
  // Two slices per tensor, with cuts that are not multiples of 8 or 16.
  Layout A, B;
  for (const auto& T : c.L) {
    const size_t k = T.numel / 3 + 1;
    A.push_back(ParamTensor{T.name, T.offset, k, T.decay});
    B.push_back(ParamTensor{T.name, T.offset + k, T.numel - k, T.decay});
  }
  std::vector<float> p1 = c.p0, m1(N, 0.f), v1(N, 0.f), u1(N, 0.f);  // lamb_update
  std::vector<float> p2 = p1, m2 = m1, v2 = v1, u2 = u1;              // two phases, unsharded
  std::vector<float> p3 = p1, m3 = m1, v3 = v1, u3 = u1;              // two phases, 2 slices
  for (int s = 0; s < c.steps; ++s) {
    const float* g = c.grads.data() + s * N;
    lamb_update(p1.data(), g, m1.data(), v1.data(), u1.data(), c.L, c.lr(s), s + 1, h);

    std::vector<double> w(NT, 0), r(NT, 0);
    lamb_compute_update(p2.data(), g, m2.data(), v2.data(), u2.data(), c.L, s + 1, h, w.data(), r.data());
    lamb_apply_update(p2.data(), u2.data(), c.L, c.lr(s), h, w.data(), r.data());

    std::vector<double> wa(NT, 0), ra(NT, 0), wb(NT, 0), rb(NT, 0), ws(NT), rs(NT);
    lamb_compute_update(p3.data(), g, m3.data(), v3.data(), u3.data(), A, s + 1, h, wa.data(), ra.data());
    lamb_compute_update(p3.data(), g, m3.data(), v3.data(), u3.data(), B, s + 1, h, wb.data(), rb.data());
    for (size_t i = 0; i < NT; ++i) ws[i] = wa[i] + wb[i], rs[i] = ra[i] + rb[i];  // the "all-reduce"
    for (size_t i = 0; i < NT; ++i) {  // the reduced sums are the whole-tensor sums
      EXPECT_NEAR(ws[i], w[i], 1e-12 * w[i]);
      EXPECT_NEAR(rs[i], r[i], 1e-12 * r[i]);
    }
    lamb_apply_update(p3.data(), u3.data(), A, c.lr(s), h, ws.data(), rs.data());
    lamb_apply_update(p3.data(), u3.data(), B, c.lr(s), h, ws.data(), rs.data());
  }
  EXPECT_TRUE(same_bits(p1, p2) && same_bits(m1, m2) && same_bits(v1, v2) && same_bits(u1, u2));
  EXPECT_TRUE(same_bits(m1, m3) && same_bits(v1, v3) && same_bits(u1, u3));
  EXPECT_TRUE(same_bits(p1, p3)) << "sharded LAMB params differ from unsharded";
}

// ------------------------------------------------------------------------------------ grad norm

TEST(GradNorm, SumOfSquaresMatchesNaive) {
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(1000), size_t(16385), size_t((1 << 20) + 3)}) {
    auto g = random_vec(n, 3.0, 5, n);
    double naive = 0;
    for (float x : g) naive += double(x) * double(x);
    EXPECT_NEAR(grad_sq_sum(g.data(), n), naive, 1e-12 * naive) << "n=" << n;
    EXPECT_NEAR(grad_l2_norm(g.data(), n), std::sqrt(naive), 1e-12 * std::sqrt(naive)) << "n=" << n;
  }
}

TEST(GradNorm, ClipScaleClosedForm) {
  EXPECT_EQ(clip_scale(123.0, 0.f), 1.f);  // disabled
  EXPECT_EQ(clip_scale(123.0, -1.f), 1.f);
  EXPECT_EQ(clip_scale(0.5, 1.f), 1.f);  // under the limit
  EXPECT_EQ(clip_scale(0.0, 1.f), 1.f);
  EXPECT_EQ(clip_scale(10.0, 1.f), static_cast<float>(1.0 / (10.0 + 1e-6)));
  EXPECT_EQ(clip_scale(std::numeric_limits<double>::infinity(), 1.f), 0.f);
  EXPECT_TRUE(std::isnan(clip_scale(std::nan(""), 1.f)));
}

TEST(GradNorm, AllFiniteAndScale) {
  auto x = random_vec(100003, 1.0, 9, 0);
  EXPECT_TRUE(all_finite(x.data(), x.size()));
  EXPECT_TRUE(all_finite(x.data(), 0));
  for (size_t pos : {size_t(0), size_t(5000), x.size() - 1})
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      auto y = x;
      y[pos] = bad;
      EXPECT_FALSE(all_finite(y.data(), y.size())) << pos << " " << bad;
    }
  x[17] = std::numeric_limits<float>::max();  // large but finite
  x[18] = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(all_finite(x.data(), x.size()));
  auto y = x;
  scale_inplace(y.data(), y.size(), 0.37f);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], x[i] * 0.37f) << i;
}

const char* kClipScript = R"PY(
import sys
try:
    import numpy as np, torch
except ImportError:
    sys.exit(77)
d = sys.argv[1]
lines = open(d + '/meta.txt').read().split('\n')
sizes = [int(x) for x in lines[0].split()]
maxes = [float(x) for x in lines[1].split()]
g = np.fromfile(d + '/grads.bin', dtype=np.float32)
norms, outs = [], []
for mx in maxes:
    ps, o = [], 0
    for n in sizes:
        p = torch.nn.Parameter(torch.zeros(n))
        p.grad = torch.from_numpy(g[o:o + n].copy())
        ps.append(p)
        o += n
    norms.append(float(torch.nn.utils.clip_grad_norm_(ps, mx)))
    outs.append(np.concatenate([p.grad.numpy() for p in ps]))
np.array(norms, dtype=np.float32).tofile(d + '/norms.bin')
np.concatenate(outs).astype(np.float32).tofile(d + '/clipped.bin')
)PY";

TEST(GradNorm, ClippingMatchesTorch) {
  const std::vector<size_t> sizes = {1000, 17, 30001};
  size_t N = 0;
  for (size_t s : sizes) N += s;
  const auto g = random_vec(N, 0.05, 13, 0);
  const double norm = grad_l2_norm(g.data(), N);
  const std::vector<float> maxes = {static_cast<float>(0.1 * norm), static_cast<float>(10 * norm)};
  const std::string dir = testing::make_temp_dir("optim_clip");
  ASSERT_FALSE(dir.empty());
  write_f32(dir + "/grads.bin", g);
  {
    std::ofstream f(dir + "/meta.txt");
    for (size_t s : sizes) f << s << " ";
    f << "\n";
    for (float mx : maxes) f << pyf(mx) << " ";
    f << "\n";
  }
  if (!run_python(dir, kClipScript)) {
    std::filesystem::remove_all(dir);
    if (!HasFailure()) MS_SKIP_OR_FAIL_IN_CI("no /usr/bin/python3 with torch");
    return;
  }
  const auto tnorms = read_f32(dir + "/norms.bin", maxes.size());
  const auto tclipped = read_f32(dir + "/clipped.bin", N * maxes.size());
  for (size_t c = 0; c < maxes.size(); ++c) {
    EXPECT_NEAR(norm, tnorms[c], 1e-6 * norm);
    auto y = g;
    scale_inplace(y.data(), N, clip_scale(norm, maxes[c]));
    expect_close(y, std::vector<float>(tclipped.begin() + c * N, tclipped.begin() + (c + 1) * N), 1e-6, 1e-12,
                 fmt::format("clipped grads, max {}", maxes[c]));
  }
  EXPECT_TRUE(same_bits(std::vector<float>(tclipped.begin() + N, tclipped.end()), g));  // not clipped: as is
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------------------------- lr schedule

TEST(LrSchedule, ClosedForm) {
  const double hi = 1e-3, lo = 1e-4;
  const LrSchedule s{1e-3f, 1e-4f, 10, 110};
  s.validate();
  const double H = float(hi), Lo = float(lo);  // the float values the schedule holds
  auto cosine = [&](double f) { return Lo + (H - Lo) * 0.5 * (1 + std::cos(std::numbers::pi * f)); };
  auto near = [](float got, double want) { EXPECT_NEAR(got, want, 1e-7 * std::fabs(want)); };
  near(s.at(0), H / 10);        // first warm-up step
  near(s.at(4), H * 5 / 10);
  EXPECT_EQ(s.at(9), s.max_lr);  // peak: last warm-up step
  near(s.at(10), H);             // cosine starts at the peak
  near(s.at(35), cosine(0.25));
  near(s.at(60), (H + Lo) / 2);  // mid-cosine
  near(s.at(109), cosine(0.99));
  EXPECT_EQ(s.at(110), s.min_lr);  // end
  EXPECT_EQ(s.at(100000), s.min_lr);
  for (int i = 1; i < 10; ++i) EXPECT_GT(s.at(i), s.at(i - 1));
  for (int i = 11; i <= 110; ++i) EXPECT_LE(s.at(i), s.at(i - 1));
  const LrSchedule nowarm{2e-3f, 0.f, 0, 100};
  EXPECT_EQ(nowarm.at(0), nowarm.max_lr);
  near(nowarm.at(50), double(nowarm.max_lr) / 2);
  EXPECT_THROW((LrSchedule{1e-3f, 0.f, 10, 5}.validate()), Error);
  EXPECT_THROW(s.at(-1), Error);
}

// ---------------------------------------------------------------------------------- determinism

struct RunOut {
  std::vector<float> p, m, v, u;
  double sq = 0;
  bool finite = false;
};

RunOut run_all(int threads) {
  omp_set_num_threads(threads);
  const Layout L = make_layout({{70001, true}, {129, false}, {33333, true}, {5, false}, {200000, true}});
  const size_t N = layout_numel(L);
  RunOut o;
  o.p = random_vec(N, 0.3, 21, 0);
  o.m.assign(N, 0.f), o.v.assign(N, 0.f), o.u.assign(N, 0.f);
  auto pl = o.p;
  std::vector<float> ml(N, 0.f), vl(N, 0.f);
  for (int s = 0; s < 3; ++s) {
    auto g = random_vec(N, 0.1, 21, 1 + s);
    adamw_update(o.p.data(), g.data(), o.m.data(), o.v.data(), L, 1e-2f, s + 1, AdamHyper{});
    lamb_update(pl.data(), g.data(), ml.data(), vl.data(), o.u.data(), L, 1e-2f, s + 1, LambHyper{});
    o.sq += grad_sq_sum(g.data(), N);
  }
  o.p.insert(o.p.end(), pl.begin(), pl.end());
  o.m.insert(o.m.end(), ml.begin(), ml.end());
  o.v.insert(o.v.end(), vl.begin(), vl.end());
  o.finite = all_finite(o.p.data(), o.p.size());
  omp_set_num_threads(2);
  return o;
}

void expect_same(const RunOut& a, const RunOut& b, const char* what) {
  EXPECT_TRUE(same_bits(a.p, b.p) && same_bits(a.m, b.m) && same_bits(a.v, b.v) && same_bits(a.u, b.u)) << what;
  EXPECT_EQ(std::memcmp(&a.sq, &b.sq, sizeof(double)), 0) << what;
  EXPECT_TRUE(a.finite && b.finite) << what;
}

TEST(Determinism, ThreadCountIndependent) {
  const RunOut one = run_all(1), two = run_all(2);
  expect_same(one, two, "1 vs 2 threads");
}

TEST(Determinism, SimdAndScalarKernelsAgree) {
  if (!optim_simd_active()) GTEST_SKIP() << "no AVX2+FMA on this CPU: only the scalar path exists";
  const RunOut simd = run_all(2);
  optim_set_simd(false);
  const RunOut scalar = run_all(2);
  optim_set_simd(true);
  expect_same(simd, scalar, "AVX2 vs scalar");
}

// The fused AdamW pass (clipping scale read on the fly, bf16 copy written and the gradient cleared
// in the same pass) gives
// the same bits as the separate passes: scale_inplace, adamw_update, then exact RNE conversion —
// on the AVX2 and scalar paths, with values that exercise rounding ties, NaN-free extremes and zeros.
TEST(AdamW, FusedScaleAndBf16CopyEqualSeparatePasses) {
  const Layout L = make_layout({{70001, true}, {129, false}, {33333, true}, {5, false}});
  const size_t N = layout_numel(L);
  for (bool simd : {true, false}) {
    optim_set_simd(simd);
    auto p1 = random_vec(N, 0.3, 31, 0);
    p1[0] = 0.0f; p1[1] = -0.0f; p1[2] = 1.00390625f;  // a bf16 tie
    auto p2 = p1;
    std::vector<float> m1(N, 0.f), v1(N, 0.f), m2(N, 0.f), v2(N, 0.f);
    std::vector<bf16_t> fused(N), separate(N);
    for (int s = 0; s < 3; ++s) {
      auto g = random_vec(N, 0.1, 31, 1 + s);
      const float scale = s == 1 ? 1.0f : 0.37f;
      auto g1 = g;
      adamw_update(p1.data(), g1.data(), m1.data(), v1.data(), L, 1e-2f, s + 1, AdamHyper{}, scale, fused.data(),
                   /*zero_grads=*/true);
      ASSERT_TRUE(std::all_of(g1.begin(), g1.end(), [](float x) { return std::bit_cast<uint32_t>(x) == 0; }))
          << "zero_grads left a nonzero gradient";
      scale_inplace(g.data(), N, scale);
      adamw_update(p2.data(), g.data(), m2.data(), v2.data(), L, 1e-2f, s + 1, AdamHyper{});
      f32_to_bf16(separate.data(), p2.data(), N, Bf16Path::kScalar);
      ASSERT_TRUE(same_bits(p1, p2) && same_bits(m1, m2) && same_bits(v1, v2)) << "simd=" << simd << " step " << s;
      ASSERT_EQ(std::memcmp(fused.data(), separate.data(), N * sizeof(bf16_t)), 0) << "simd=" << simd << " step " << s;
    }
  }
  optim_set_simd(true);
}

}  // namespace
}  // namespace ms
