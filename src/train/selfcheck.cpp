// selfcheck.cpp: see selfcheck.h.
#include "train/selfcheck.h"

#include <algorithm>
#include <cmath>
#include <memory>   // unique_ptr

#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/check.h"        // MS_CHECK, MS_FAIL
#include "base/clock.h"        // SteadyClock, seconds_since
#include "base/dtype.h"        // DType
#include "base/rng.h"          // Rng
#include "comm/communicator.h" // Communicator
#include "kernels/backend.h"   // cuda_kernels (the GPU GEMM)
#include "kernels/matmul.h"    // sgemm

namespace ms {

namespace {

std::string human_bytes(size_t bytes) {
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

}  // namespace

// ---- GEMM ----

GemmProblem make_gemm_problem(int m, int n, int k, uint64_t seed) {
  MS_CHECK(m >= 1 && n >= 1 && k >= 1, "selfcheck GEMM: shape m={} n={} k={} must be positive", m, n, k);
  GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.a.resize(static_cast<size_t>(m) * k);
  p.b.resize(static_cast<size_t>(k) * n);
  Rng ra(seed, 1), rb(seed, 2);
  for (float& x : p.a) x = static_cast<float>(2.0 * ra.uniform() - 1.0);
  for (float& x : p.b) x = static_cast<float>(2.0 * rb.uniform() - 1.0);
  return p;
}

void run_gemm(const GemmProblem& p, float* c) {
  sgemm(false, false, p.m, p.n, p.k, 1.0f, p.a.data(), p.k, p.b.data(), p.n, 0.0f, c, p.n);
}

GemmComparison compare_gemm_to_reference(const GemmProblem& p, const float* c, int samples, double rtol,
                                         uint64_t seed) {
  MS_CHECK(samples >= 1, "selfcheck GEMM: samples must be >= 1, got {}", samples);
  GemmComparison r;
  Rng pick(seed, 3);
  for (int s = 0; s < samples; s++) {
    const int i = static_cast<int>(pick.next_u64() % static_cast<uint64_t>(p.m));
    const int j = static_cast<int>(pick.next_u64() % static_cast<uint64_t>(p.n));
    double ref = 0, scale = 0;
    for (int kk = 0; kk < p.k; kk++) {
      const double t = static_cast<double>(p.a[static_cast<size_t>(i) * p.k + kk]) *
                       static_cast<double>(p.b[static_cast<size_t>(kk) * p.n + j]);
      ref += t;
      scale += std::fabs(t);
    }
    const double got = c[static_cast<size_t>(i) * p.n + j];
    const double err = std::isfinite(got) ? std::fabs(got - ref) / std::max(scale, 1e-30) : INFINITY;
    if (r.worst_i < 0 || !(err <= r.max_rel_err))
      r.max_rel_err = err, r.worst_i = i, r.worst_j = j, r.worst_got = got, r.worst_expected = ref;
  }
  r.ok = r.max_rel_err <= rtol;
  if (!r.ok)
    r.error = fmt::format("GEMM {}x{}x{}: C[{},{}] is {:.9g}, expected {:.9g} (relative error {:.3g} > {:.3g})",
                          p.m, p.n, p.k, r.worst_i, r.worst_j, r.worst_got, r.worst_expected, r.max_rel_err, rtol);
  return r;
}

namespace {
// The GEMM on the GPU: cuBLASLt through the CUDA kernel backend (true fp32), inputs uploaded once.
struct DeviceGemm {
  DeviceBuffer<float> a, b, c;
  KernelBackend& k;
  const GemmProblem& p;
  explicit DeviceGemm(const GemmProblem& prob) : k(cuda_kernels()), p(prob) {
    a.resize(p.a.size()), b.resize(p.b.size()), c.resize(static_cast<size_t>(p.m) * p.n);
    a.upload(p.a.data(), p.a.size(), k.stream());
    b.upload(p.b.data(), p.b.size(), k.stream());
  }
  void run() { k.gemm_f32(false, false, p.m, p.n, p.k, a.data(), b.data(), c.data(), false); }
  void result(float* host) {
    c.download(host, c.size(), k.stream());
    stream_sync(k.stream());
  }
};
}  // namespace

GemmCheckResult run_gemm_check(const GemmCheckOptions& opt) {
  const GemmProblem p = make_gemm_problem(opt.m, opt.n, opt.k, opt.seed);
  std::vector<float> c(static_cast<size_t>(opt.m) * opt.n);
  std::unique_ptr<DeviceGemm> dev;
  if (opt.device == Device::kCuda) dev = std::make_unique<DeviceGemm>(p);
  auto gemm = [&] { dev ? dev->run() : run_gemm(p, c.data()); };
  gemm();  // also the warm-up of the timed phase
  if (dev) dev->result(c.data());
  GemmComparison first = compare_gemm_to_reference(p, c.data(), opt.samples, opt.rtol, opt.seed);

  GemmCheckResult r;
  const auto t0 = SteadyClock::now();
  double elapsed = 0;
  do {
    gemm();
    if (dev) stream_sync(dev->k.stream());
    r.timed_gemms++;
    elapsed = seconds_since(t0);
  } while (elapsed < opt.bench_seconds);
  if (dev) dev->result(c.data());
  r.gflops = 2.0 * opt.m * opt.n * static_cast<double>(opt.k) * r.timed_gemms / elapsed / 1e9;

  // The last timed product is checked too: a machine that fails under sustained load fails here.
  GemmComparison last = compare_gemm_to_reference(p, c.data(), opt.samples, opt.rtol, opt.seed);
  r.max_rel_err = std::max(first.max_rel_err, last.max_rel_err);
  if (!std::isfinite(first.max_rel_err) || !std::isfinite(last.max_rel_err)) r.max_rel_err = INFINITY;
  r.ok = first.ok && last.ok;
  if (!first.ok) r.error = first.error;
  else if (!last.ok) r.error = "after " + std::to_string(r.timed_gemms) + " timed GEMMs: " + last.error;
  return r;
}

// ---- Collective ----

std::string check_allreduce_sum(const float* got, size_t count, int world) {
  const double expected = 0.5 * world * (world + 1.0);
  for (size_t e = 0; e < count; e++)
    if (!(static_cast<double>(got[e]) == expected))
      return fmt::format("all_reduce(sum) of {} float(s) ({}) over {} ranks: element {} is {:g}, expected {:g}",
                         count, human_bytes(count * sizeof(float)), world, e, got[e], expected);
  return "";
}

namespace {

// The buffers the engine reads and writes during the collective check.
struct CollectiveBuffers {
  std::vector<float> data;      // correctness and bandwidth all-reduces
  DeviceBuffer<float> dev;      // their GPU copy (CollectiveCheckOptions::device kCuda)
  float mine[2] = {0, 0};       // agreement: (failed flag, contribution) of this rank
  std::vector<float> all;       // agreement: every rank's pair
  float per_op = 0;             // bandwidth: this rank's seconds per all-reduce, then the max
};

void run_collective_phases(Communicator& comm, const CollectiveCheckOptions& opt, CollectiveBuffers& b,
                           CollectiveCheckResult& r) {
  const int world = comm.size();
  const float contribution = static_cast<float>(comm.rank() + (opt.inject_fault ? 2 : 1));

  // (a) Correctness: every rank checks every size.
  std::string local_error;
  const bool gpu = opt.device == Device::kCuda;
  const StreamOrder on{opt.device, Stream{}};
  // The all-reduce of b.data (host), through its GPU copy when the check is of device buffers.
  auto all_reduce = [&](size_t count) {
    if (!gpu) return comm.all_reduce(b.data.data(), count, DType::kF32, ReduceOp::kSum);
    if (b.dev.size() < count) b.dev.resize(count);
    b.dev.upload(b.data.data(), count);
    comm.all_reduce(b.dev.data(), count, DType::kF32, ReduceOp::kSum, on);
    b.dev.download(b.data.data(), count);
    stream_sync({});
  };
  for (size_t count : opt.sizes) {
    b.data.assign(count, contribution);
    all_reduce(count);
    if (local_error.empty()) local_error = check_allreduce_sum(b.data.data(), count, world);
  }

  // Agreement: every rank learns every rank's (failed flag, contribution).
  b.mine[0] = local_error.empty() ? 0.0f : 1.0f;
  b.mine[1] = contribution;
  b.all.assign(2 * static_cast<size_t>(world), 0.0f);
  comm.all_gather(b.mine, b.all.data(), 2, DType::kF32);
  for (int q = 0; q < world; q++) {
    if (b.all[2 * q] != 0.0f) r.failed_ranks.push_back(q);
    if (b.all[2 * q + 1] != static_cast<float>(q + 1)) r.suspect_ranks.push_back(q);
  }
  r.ok = r.failed_ranks.empty();
  if (!local_error.empty()) {
    r.error = local_error;
  } else if (!r.ok) {
    std::string who;
    for (int q : r.failed_ranks) {
      if (!who.empty()) who += ',';
      who += std::to_string(q);
    }
    r.error = fmt::format("rank(s) {} saw a wrong all_reduce sum (this rank's sums were right)", who);
  }

  // (b) Bandwidth: one warm-up, then bench_iters timed all-reduces; the slowest rank's time counts.
  // A group of one moves nothing across any link (its "all-reduce" is a memory copy, whose speed
  // under load says nothing of the host's health): not measured, reported as null.
  if (comm.size() == 1) return;
  const size_t count = opt.bench_bytes / sizeof(float);
  b.data.assign(count, 1.0f);
  all_reduce(count);
  comm.barrier();
  void* buf = gpu ? static_cast<void*>(b.dev.data()) : static_cast<void*>(b.data.data());
  const auto t0 = SteadyClock::now();
  for (int it = 0; it < opt.bench_iters; it++) comm.all_reduce(buf, count, DType::kF32, ReduceOp::kSum, on);
  if (gpu) stream_sync({});
  b.per_op = static_cast<float>(seconds_since(t0) / opt.bench_iters);
  comm.all_reduce(&b.per_op, 1, DType::kF32, ReduceOp::kMax);
  r.gbps = b.per_op > 0 ? static_cast<double>(count * sizeof(float)) / b.per_op / 1e9 : 0;
}

}  // namespace

CollectiveCheckResult run_collective_check(Communicator& comm, const CollectiveCheckOptions& opt) {
  MS_CHECK(opt.bench_iters >= 1, "selfcheck collective: bench_iters must be >= 1, got {}", opt.bench_iters);
  MS_CHECK(opt.bench_bytes >= sizeof(float), "selfcheck collective: bench_bytes must be >= 4, got {}", opt.bench_bytes);
  CollectiveCheckResult r;
  r.fault_injected = opt.inject_fault;
  // On a communication failure the buffers are leaked, not freed: under MPI a timed-out collective
  // may still write into its buffer (comm_fatal.h).
  auto buffers = std::make_unique<CollectiveBuffers>();
  try {
    run_collective_phases(comm, opt, *buffers, r);
  } catch (const CommError&) {
    (void)buffers.release();
    throw;
  }
  return r;
}


// ---- Report ----

bool SelfCheckReport::ok() const {
  return error.empty() && (!gemm_requested || (gemm && gemm->ok)) &&
         (!collective_requested || (collective && collective->ok)) && (gemm_requested || collective_requested);
}

std::string selfcheck_report_json(const SelfCheckReport& r) {
  using nlohmann::json;
  // JSON has no infinity: a non-finite measure is written as null (its check then failed).
  auto num = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  const std::string stopped = r.error.empty() ? "not run" : "not run: " + r.error;
  json j = {{"rank", r.rank}, {"world", r.world}, {"host_index", r.host_index}};
  j["gemm_ok"] = r.gemm ? json(r.gemm->ok) : r.gemm_requested ? json(false) : json(nullptr);
  j["gemm_max_rel_err"] = r.gemm ? num(r.gemm->max_rel_err) : json(nullptr);
  j["gemm_gflops"] = r.gemm ? num(r.gemm->gflops) : json(nullptr);
  j["gemm_error"] = r.gemm ? (r.gemm->ok ? json(nullptr) : json(r.gemm->error))
                           : r.gemm_requested ? json(stopped) : json(nullptr);
  j["allreduce_ok"] = r.collective ? json(r.collective->ok) : r.collective_requested ? json(false) : json(nullptr);
  j["allreduce_error"] = r.collective ? (r.collective->ok ? json(nullptr) : json(r.collective->error))
                                      : r.collective_requested ? json(stopped) : json(nullptr);
  j["allreduce_gbps"] = r.collective && r.collective->gbps > 0 ? num(r.collective->gbps) : json(nullptr);
  j["allreduce_failed_ranks"] = r.collective ? json(r.collective->failed_ranks) : json(nullptr);
  j["allreduce_suspect_ranks"] = r.collective ? json(r.collective->suspect_ranks) : json(nullptr);
  j["fault_injected"] = r.collective && r.collective->fault_injected;
  j["error"] = r.error.empty() ? json(nullptr) : json(r.error);
  j["seconds"] = r.seconds;
  j["ok"] = r.ok();
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace ms
