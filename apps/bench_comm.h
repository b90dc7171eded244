// bench_comm: `megascale bench comm`, start-up and bandwidth of the communication layer.
// The parent (run_comm_bench) launches, through run_launcher, N ranks of `megascale bench comm-worker`
// per (store, rank count). Each worker times init_world (the rendezvous) and the creation of a
// RankGrid (tp=2, pp=2 when N >= 8, dp the rest; order tp-dp-pp), and reports the maximum over ranks.
// Then, for message sizes 4 KiB..64 MiB (fp32), it times all_reduce, reduce_scatter and all_gather
// on the world group: warm-up iterations first (their results are checked against closed forms, each
// rank contributing values from its rank), then `iters` timed ones, each started after a barrier;
// an iteration's time is the slowest rank's, and a row reports the median. Bandwidths follow
// NCCL-tests: algbw = size / time, where size is the whole buffer (all_reduce's buffer,
// reduce_scatter's input, all_gather's output); busbw = algbw * 2(n-1)/n for all_reduce and
// algbw * (n-1)/n for reduce_scatter and all_gather. With busy, the same ops again as "<op>_busy"
// rows, each run following an sgemm burst on the rank's share of the cores instead of a barrier
// (what a tensor-parallel collective costs inside a step). Rank 0 writes its results as JSON for the
// parent, which prints one table and optionally writes all rows as JSON.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ms {

struct CommBenchOptions {
  std::vector<int> ranks = {8, 16, 32};  // rank counts of the start-up rows
  std::vector<std::string> stores = {"file", "redis"};
  std::string sizes = "4K..64M";  // see parse_byte_sizes
  int iters = 10;                 // timed iterations per (op, size)
  int warmup = 2;                 // untimed (checked) iterations before them
  bool bandwidth_all = false;     // bandwidth rows for every rank count (default: the smallest only)
  bool mpi = false;               // also bandwidth rows on MPI (mpirun -np N, smallest rank count)
  bool busy = false;              // also "<op>_busy" rows: each collective right after a compute burst
  std::string json_path;          // write every row here as JSON (empty: no file)
};

// Runs the benchmark and prints the table; returns 0, or 1 when a configuration failed (the others
// still run and print).
int run_comm_bench(const CommBenchOptions& opt);

struct CommBenchWorkerOptions {
  std::string sizes = "4K..64M";
  int iters = 10;
  int warmup = 2;
  bool bandwidth = true;  // false: start-up only
  bool busy = false;      // also "<op>_busy" rows (CommBenchOptions::busy)
  std::string backend;    // "" : from the environment (CommEnv::from_environment); else forced
  std::string out;        // rank 0 writes its results here as JSON ("" : print them)
};

// One rank of the benchmark; its environment comes from the launcher (or mpirun).
void run_comm_bench_worker(const CommBenchWorkerOptions& opt);

// "4K..64M": powers of 4 from 4 KiB up to at most 64 MiB; "4K,1M,3000": a list. Each size is
// decimal digits and an optional unit parsed by CLI11 (CLI::AsSizeValue, binary: K = KiB, M = MiB,
// G = GiB, ..., any case, "KiB" and "B" too); sizes must be positive multiples of 4 bytes (fp32
// elements). Throws ms::Error naming the bad size, also for one that overflows 64 bits.
std::vector<size_t> parse_byte_sizes(const std::string& spec);
// 4096 -> "4 KiB", 1048576 -> "1 MiB", 3000 -> "3000 B".
std::string format_bytes(size_t bytes);

}  // namespace ms
