// bench_comm: see bench_comm.h.
#include "bench_comm.h"

#include <unistd.h>  // getpid

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <CLI/CLI.hpp>  // CLI::AsSizeValue, CLI::detail::lexical_cast
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <omp.h>

#include "base/atomic_file.h"  // write_text_atomic
#include "kernels/matmul.h"     // sgemm (busy rows)
#include "base/check.h"
#include "base/log.h"  // make_named_logger
#include "comm/comm_env.h"       // CommEnv
#include "comm/communicator.h"  // Communicator
#include "comm/world.h"          // init_world
#include "app_paths.h"         // self_executable
#include "launch/host_launcher.h"  // launch::shell_quote
#include "launch/launcher.h"
#include "comm/rank_grid.h"
#include "base/clock.h"  // SteadyClock

namespace ms {
namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = SteadyClock;

namespace {

// One size of --sizes: digits, optionally followed by a unit (CLI11's size units, binary: K = KiB,
// M = MiB, ..., case-insensitive, "KiB"/"kb"/"B" spellings too). The digits are checked here so that
// CLI11 sees a plain decimal (no sign, no 0x, no octal leading zero); CLI11 applies the unit and
// rejects a product that overflows 64 bits.
size_t parse_one_size(const std::string& s) {
  MS_CHECK(!s.empty(), "empty size in --sizes");
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') digits++;
  size_t unit = digits;
  while (unit < s.size() && s[unit] == ' ') unit++;
  const bool letters_only = std::all_of(s.begin() + (std::ptrdiff_t)unit, s.end(),
                                        [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); });
  MS_CHECK(digits > 0 && letters_only, "bad size '{}' in --sizes (expected e.g. 4096, 4K, 64M)", s);
  size_t lead = 0;
  while (lead + 1 < digits && s[lead] == '0') lead++;  // "0064K" -> "64K" (not octal)
  MS_CHECK(digits - lead <= 19, "size '{}' in --sizes is too large", s);  // strtoull would saturate
  std::string value = s.substr(lead);
  try {
    static const CLI::AsSizeValue kSize(/*kb_is_1000=*/false);
    const std::string error = kSize(value);  // rewrites value to the byte count
    MS_CHECK(error.empty(), "bad size '{}' in --sizes: {}", s, error);
  } catch (const CLI::Error& e) {
    MS_FAIL("bad size '{}' in --sizes: {}", s, e.what());
  }
  uint64_t bytes = 0;
  MS_CHECK(CLI::detail::lexical_cast(value, bytes), "bad size '{}' in --sizes", s);
  MS_CHECK(bytes > 0 && bytes % 4 == 0, "size '{}' must be a positive multiple of 4 bytes (fp32)", s);
  MS_CHECK(bytes <= std::numeric_limits<size_t>::max(), "size '{}' in --sizes is too large", s);
  return (size_t)bytes;
}

// Progress and failure notices on stderr, "bench comm: <message>" (spdlog, not registered globally).
spdlog::logger& bench_log() {
  static const std::shared_ptr<spdlog::logger> logger = make_named_logger("bench comm");
  return *logger;
}

// The benchmark grid of n ranks: tp=2 when n is even, pp=2 when n >= 8 and it divides, dp the rest.
GridShape bench_shape(int n) {
  GridShape s;
  s.tp = n % 2 == 0 ? 2 : 1;
  s.pp = n >= 8 && (n / s.tp) % 2 == 0 ? 2 : 1;
  s.dp = n / (s.tp * s.pp);
  return s;
}

// Element i of rank r's input: r + i % 3, so every sum below is an exact integer in fp32.
void fill(std::vector<float>& v, int rank, size_t offset = 0) {
  for (size_t i = 0; i < v.size(); i++) v[i] = (float)(rank + (int)((offset + i) % 3));
}

// Checks one op's result against its closed form; throws naming the first wrong element.
void check_result(const std::string& op, const std::vector<float>& got, int rank, int n, size_t shard) {
  const float base = (float)n * (float)(n - 1) / 2.0f;
  for (size_t i = 0; i < got.size(); i++) {
    float want;
    if (op == "all_reduce") want = base + (float)n * (float)(i % 3);
    else if (op == "reduce_scatter") want = base + (float)n * (float)((rank * shard + i) % 3);
    else want = (float)(i / shard) + (float)((i % shard) % 3);  // all_gather: rank s's shard at s*shard
    MS_CHECK(got[i] == want, "{} on {} ranks: element {} of rank {} is {}, expected {}", op, n, i, rank, got[i],
             want);
  }
}

// A compute burst as a training step's: an OpenMP sgemm of about a millisecond on the rank's threads.
void compute_burst() {
  static std::vector<float> a(384 * 384, 0.5f), b(384 * 384, 0.25f), c(384 * 384);
  for (int i = 0; i < 4; i++) sgemm(false, false, 384, 384, 384, 1.0f, a.data(), 384, b.data(), 384, 0.0f, c.data(), 384);
}

// Times one collective on the world group: warm-up (checked), then iters timed runs. Returns the
// median over iterations of the slowest rank's time, in seconds; bytes = NCCL-tests "size".
// busy: each timed run follows a compute burst instead of a barrier, as a tensor-parallel
// collective follows a GEMM in training: the time includes the ranks' arrival skew and the wait for
// the communication thread to get a core.
double time_op(Communicator& world, const std::string& op, size_t bytes, int warmup, int iters, size_t& size_out,
               bool busy = false) {
  const int n = world.size(), r = world.rank();
  const size_t count = bytes / sizeof(float);
  const size_t shard = count / (size_t)n;
  std::vector<float> big, small;
  if (op == "all_reduce") {
    big.resize(count);
    size_out = count * sizeof(float);
  } else {
    MS_CHECK(shard > 0, "{}: {} is too small for {} ranks", op, format_bytes(bytes), n);
    big.resize(shard * (size_t)n);
    small.resize(shard);
    size_out = big.size() * sizeof(float);
  }
  auto prepare = [&] {
    if (op == "all_reduce" || op == "reduce_scatter") fill(big, r);
    else fill(small, r);
  };
  auto run = [&] {
    if (op == "all_reduce") world.all_reduce(big.data(), big.size(), DType::kF32, ReduceOp::kSum);
    else if (op == "reduce_scatter") world.reduce_scatter(big.data(), small.data(), shard, DType::kF32, ReduceOp::kSum);
    else world.all_gather(small.data(), big.data(), shard, DType::kF32);
  };
  for (int i = 0; i < warmup; i++) {
    prepare();
    run();
    check_result(op, op == "reduce_scatter" ? small : big, r, n, shard);
  }
  std::vector<float> times((size_t)iters);
  for (int i = 0; i < iters; i++) {
    prepare();
    if (busy) compute_burst();
    else world.barrier();
    const auto t0 = Clock::now();
    run();
    times[(size_t)i] = (float)seconds_since(t0);
  }
  world.all_reduce(times.data(), times.size(), DType::kF32, ReduceOp::kMax);
  std::sort(times.begin(), times.end());
  const size_t m = times.size();
  return m % 2 ? times[m / 2] : 0.5 * ((double)times[m / 2 - 1] + (double)times[m / 2]);
}

std::string store_kind(const std::string& store) {
  if (store.rfind("file:", 0) == 0) return "file";
  if (store.rfind("redis://", 0) == 0) return "redis";
  return store.empty() ? "-" : store;
}

// Reads the JSON rank 0 of a worker run wrote; throws if it is missing.
json read_worker_json(const std::string& path) {
  std::ifstream f(path);
  MS_CHECK(f.good(), "the benchmark workers wrote no results to {}", path);
  return json::parse(f);
}

}  // namespace

std::vector<size_t> parse_byte_sizes(const std::string& spec) {
  std::vector<size_t> out;
  const size_t dots = spec.find("..");
  if (dots != std::string::npos) {
    const size_t lo = parse_one_size(spec.substr(0, dots)), hi = parse_one_size(spec.substr(dots + 2));
    MS_CHECK(lo <= hi, "--sizes {}: the first size is larger than the last", spec);
    // Powers of 4 from lo while <= hi; the test before multiplying keeps s * 4 from overflowing.
    for (size_t s = lo;; s *= 4) {
      out.push_back(s);
      if (s > hi / 4) break;
    }
  } else {
    std::stringstream ss(spec);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(parse_one_size(item));
  }
  MS_CHECK(!out.empty(), "--sizes '{}' names no size", spec);
  return out;
}

std::string format_bytes(size_t b) {
  if (b >= (size_t(1) << 30) && b % (size_t(1) << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (size_t(1) << 20) && b % (size_t(1) << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= (size_t(1) << 10) && b % (size_t(1) << 10) == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

void run_comm_bench_worker(const CommBenchWorkerOptions& opt) {
  MS_CHECK(opt.iters >= 1 && opt.warmup >= 1, "--iters and --warmup must be >= 1");
  const std::vector<size_t> sizes = parse_byte_sizes(opt.sizes);
  CommEnv env = CommEnv::from_environment();
  if (!opt.backend.empty()) env.backend = opt.backend;

  const auto t0 = Clock::now();
  std::unique_ptr<Communicator> world_owner = init_world(env);
  const double init_s = seconds_since(t0);
  const int n = world_owner->size();
  const GridShape shape = bench_shape(n);
  const auto t1 = Clock::now();
  RankGrid grid(std::move(world_owner), "tp-dp-pp", shape);
  const double grid_s = seconds_since(t1);
  Communicator& world = grid.world();
  float startup[2] = {(float)init_s, (float)grid_s};
  world.all_reduce(startup, 2, DType::kF32, ReduceOp::kMax);

  json result = {{"backend", world.backend()},
                 {"store", env.backend == "gloo" ? store_kind(env.store) : "-"},
                 {"ranks", n},
                 {"grid", fmt::format("tp={},dp={},pp={}", shape.tp, shape.dp, shape.pp)},
                 {"init_world_ms", startup[0] * 1e3},
                 {"rank_grid_ms", startup[1] * 1e3},
                 {"iters", opt.iters},
                 {"warmup", opt.warmup},
                 {"rows", json::array()}};
  if (opt.bandwidth) {
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"})
      for (size_t bytes : sizes) {
        size_t size = 0;
        const double t = time_op(world, op, bytes, opt.warmup, opt.iters, size);
        const double algbw = (double)size / t / 1e9;
        const double factor = std::string(op) == "all_reduce" ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
        result["rows"].push_back({{"op", op},
                                  {"bytes", size},
                                  {"time_us", t * 1e6},
                                  {"algbw_GBps", algbw},
                                  {"busbw_GBps", algbw * factor}});
      }
  }
  if (opt.bandwidth && opt.busy) {  // the same collectives right after compute, threads as training picks
    omp_set_num_threads(std::max(1, omp_get_num_procs() / std::max(1, env.local_world_size)));
    for (const char* op : {"all_reduce", "reduce_scatter", "all_gather"})
      for (size_t bytes : sizes) {
        size_t size = 0;
        const double t = time_op(world, op, bytes, opt.warmup, opt.iters, size, /*busy=*/true);
        const double algbw = (double)size / t / 1e9;
        const double factor = std::string(op) == "all_reduce" ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
        result["rows"].push_back({{"op", std::string(op) + "_busy"},
                                  {"bytes", size},
                                  {"time_us", t * 1e6},
                                  {"algbw_GBps", algbw},
                                  {"busbw_GBps", algbw * factor}});
      }
  }
  world.barrier();
  if (world.rank() == 0) {
    if (opt.out.empty()) {
      fmt::print("{}\n", result.dump(2));
    } else {
      write_text_atomic(opt.out, result.dump(2) + "\n");
    }
  }
}

int run_comm_bench(const CommBenchOptions& opt) {
  MS_CHECK(!opt.ranks.empty() && !opt.stores.empty(), "--ranks and --store need at least one value");
  for (int n : opt.ranks) MS_CHECK(n >= 1 && n <= 1024, "--ranks: {} is not in 1..1024", n);
  for (const auto& s : opt.stores)
    MS_CHECK(s == "file" || s == "redis" || s.rfind("redis://", 0) == 0, "--store: unknown store '{}'", s);
  MS_CHECK(opt.iters >= 1 && opt.warmup >= 1, "--iters and --warmup must be >= 1");
  const std::vector<size_t> sizes = parse_byte_sizes(opt.sizes);  // validate before launching anything
  const int smallest = *std::min_element(opt.ranks.begin(), opt.ranks.end());
  const std::vector<std::string> self = {self_executable()};

  const fs::path tmp = fs::temp_directory_path() / fmt::format("megascale-bench-comm-{}", ::getpid());
  fs::create_directories(tmp);
  struct Cleanup { fs::path p; ~Cleanup() { std::error_code ec; fs::remove_all(p, ec); } } cleanup{tmp};

  auto worker_args = [&](bool bandwidth, const std::string& out) {
    std::vector<std::string> a = {self[0], "bench", "comm-worker", "--sizes", opt.sizes,
                                  "--iters", std::to_string(opt.iters), "--warmup", std::to_string(opt.warmup),
                                  "--out", out};
    if (!bandwidth) a.push_back("--no-bandwidth");
    if (opt.busy) a.push_back("--busy");
    return a;
  };

  std::vector<json> results;
  int failures = 0, run = 0;
  for (const auto& store : opt.stores)
    for (int n : opt.ranks) {
      const bool bandwidth = &store == &opt.stores.front() && (opt.bandwidth_all || n == smallest);
      const std::string out = (tmp / fmt::format("run{}.json", run++)).string();
      bench_log().info("{} ranks, gloo, {} store{}", n, store, bandwidth ? ", bandwidth" : "");
      LaunchOptions lo;
      lo.nproc = n;
      lo.store = launch::parse_store_spec(store);
      lo.quiet_others = true;
      lo.janitor = janitor_command();
      lo.command = worker_args(bandwidth, out);
      const LaunchResult r = run_launcher(lo);
      if (r.exit_code != 0) {
        bench_log().error("{} ranks on the {} store failed: {}", n, store, r.failure);
        failures++;
        continue;
      }
      results.push_back(read_worker_json(out));
    }
  if (opt.mpi) {
    const std::string out = (tmp / fmt::format("run{}.json", run++)).string();
    std::string cmd = fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np {} "
                                  "--oversubscribe --bind-to none",
                                  smallest);
    for (const auto& a : worker_args(true, out)) {
      cmd += ' ';
      cmd += launch::shell_quote(a);
    }
    cmd += " --backend mpi";
    bench_log().info("{} ranks, mpi, bandwidth", smallest);
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      bench_log().error("the MPI run failed (mpirun status {})", rc);
      failures++;
    } else {
      results.push_back(read_worker_json(out));
    }
  }

  // The table.
  fmt::print("start-up (max over ranks; grid order tp-dp-pp)\n");
  fmt::print("{:<8} {:<6} {:>6} {:<16} {:>14} {:>13} {:>10}\n", "backend", "store", "ranks", "grid", "init_world ms",
             "rank_grid ms", "total ms");
  for (const auto& j : results)
    fmt::print("{:<8} {:<6} {:>6} {:<16} {:>14.1f} {:>13.1f} {:>10.1f}\n", j["backend"].get<std::string>(),
               j["store"].get<std::string>(), j["ranks"].get<int>(), j["grid"].get<std::string>(),
               j["init_world_ms"].get<double>(), j["rank_grid_ms"].get<double>(),
               j["init_world_ms"].get<double>() + j["rank_grid_ms"].get<double>());
  for (const auto& j : results) {
    if (j["rows"].empty()) continue;
    fmt::print("\nbandwidth: {}, {} ranks, fp32, median of {} iterations after {} checked warm-up, slowest rank\n",
               j["backend"].get<std::string>(), j["ranks"].get<int>(), j["iters"].get<int>(), j["warmup"].get<int>());
    fmt::print("{:<16} {:>10} {:>12} {:>11} {:>11}\n", "op", "size", "time us", "algbw GB/s", "busbw GB/s");
    for (const auto& row : j["rows"])
      fmt::print("{:<16} {:>10} {:>12.1f} {:>11.3f} {:>11.3f}\n", row["op"].get<std::string>(),
                 format_bytes(row["bytes"].get<size_t>()), row["time_us"].get<double>(),
                 row["algbw_GBps"].get<double>(), row["busbw_GBps"].get<double>());
  }
  if (!opt.json_path.empty()) {
    const json all = {{"cores", usable_cores()}, {"runs", results}};
    write_text_atomic(opt.json_path, all.dump(2) + "\n");
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace ms
