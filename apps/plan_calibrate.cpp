// plan_calibrate.cpp: see plan_calibrate.h.
#include "plan_calibrate.h"

#include <omp.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/atomic_file.h"  // write_text_atomic
#include "base/check.h"
#include "app_paths.h"            // self_executable
#include "bench_comm.h"           // run_comm_bench
#include "data/token_shard.h"     // write_token_shard
#include "kernels/hw_peak.h"      // hardware_peak
#include "base/device.h"         // cuda_device_info
#include "plan/cluster_desc.h"    // parse_cluster_toml
#include "plan/gpu_calibrate.h"   // measure_gpu_rates, gpu_efficiencies
#include "plan/host_calibrate.h"  // measure_host_compute, fit_comm

namespace ms {

namespace {

namespace fs = std::filesystem;

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? "CPU" : line.substr(line.find_first_not_of(' ', c + 1));
    }
  return "CPU";
}

// [comm.<backend>] from `megascale bench comm` at `ranks` ranks (Gloo through the launcher, and MPI).
std::map<std::string, std::map<std::string, plan::CommTable>> measure_comm(int ranks, bool quick) {
  const fs::path json = fs::temp_directory_path() / fmt::format("megascale-calibrate-{}.json", ::getpid());
  CommBenchOptions o;
  o.ranks = {ranks}, o.stores = {"file"}, o.mpi = true, o.busy = true, o.json_path = json.string();
  o.sizes = quick ? "16K..4M" : "16K..64M", o.iters = quick ? 3 : 8;
  MS_CHECK(run_comm_bench(o) == 0, "calibrate-host: the collective benchmark failed (see above)");
  std::ifstream f(json);
  const nlohmann::json all = nlohmann::json::parse(f);
  std::error_code ec;
  fs::remove(json, ec);
  std::map<std::string, std::map<std::string, plan::CommTable>> out;
  for (const auto& run : all["runs"])
    for (const auto& r : run["rows"]) {
      plan::CommTable& c = out[run["backend"].get<std::string>()][r["op"].get<std::string>()];
      c.ranks = run["ranks"].get<int>();
      c.bytes.push_back(r["bytes"].get<double>()), c.us.push_back(r["time_us"].get<double>());
    }
  MS_CHECK(out.count("gloo") && out.count("mpi"), "calibrate-host: the benchmark gave no {} rows",
           out.count("gloo") ? "MPI" : "Gloo");
  return out;
}

// Peak RSS (MiB) of a command and everything it waited for (wait4's rusage: the largest process).
double peak_rss_mib(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  MS_CHECK(posix_spawn_file_actions_init(&fa) == 0, "calibrate-host: posix_spawn_file_actions_init");
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  MS_CHECK(rc == 0, "calibrate-host: posix_spawn {}: {}", argv[0], std::strerror(rc));
  int status = 0;
  struct rusage ru {};
  MS_CHECK(wait4(pid, &status, 0, &ru) == pid, "calibrate-host: wait4 {}: {}", argv[0], std::strerror(errno));
  MS_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "calibrate-host: '{}' failed (status {})",
           fmt::join(argv, " "), status);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // KiB on Linux
}

// The process floors: a negligible model trained a few steps alone, and over `ranks` Gloo ranks.
std::pair<double, double> measure_floors(int ranks) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("megascale-calibrate-floor-{}", ::getpid());
  fs::create_directories(dir);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};
  std::vector<uint16_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = static_cast<uint16_t>((i * 7919) % 128);
  write_token_shard((dir / "train.bin").string(), tokens);
  const std::string cfg = (dir / "cfg.toml").string();
  std::ofstream(cfg) << fmt::format(
      "[model]\nvocab_size = 128\nn_layer = 1\nn_head = 2\nn_embd = 64\nmax_seq_len = 64\n"
      "[data]\ntrain = \"{}\"\n[train]\nsteps = 3\nbatch_size = 2\nseq_len = 64\neval_every = 0\n"
      "sample_tokens = 0\nprogress = \"lines\"\n[checkpoint]\nevery = 0\n",
      (dir / "train.bin").string());
  const std::string self = self_executable();
  const double alone = peak_rss_mib({self, "train", cfg, "--train.out_dir=" + (dir / "run1").string()});
  const double rank = peak_rss_mib({self, "launch", "--nproc", std::to_string(ranks), "--", "train", cfg,
                                    "--train.out_dir=" + (dir / "run2").string()});
  return {alone, rank};
}

// --device cuda: the GPU description with its measured compute constants.
int run_calibrate_gpu(const CalibrateHostArgs& a) {
  MS_CHECK(!a.out.empty(), "plan --calibrate-host --device cuda: --out CLUSTER.toml is required");
  plan::GpuCalibrateOptions o;
  if (a.quick) o.gemm_dim = 2048, o.att_batch = 1, o.att_seq = 1024, o.ln_rows = 4096, o.ln_cols = 1024, o.repeats = 3;
  std::string name = a.cluster;
  if (name.empty()) {  // by the device's name (checked to open before anything else is measured)
    MS_CHECK(cuda_available(), "plan --calibrate-host --device cuda: no CUDA device opens: {}",
             cuda_unavailable_reason());
    const std::string dev = cuda_device_info().name;
    MS_CHECK(dev.find("H100") != std::string::npos || dev.find("H200") != std::string::npos,
             "plan --calibrate-host --device cuda: no built-in description of '{}': give --cluster FILE.toml", dev);
    name = dev.find("H200") != std::string::npos ? "h200-141g" : "h100-80g";
  }
  plan::ClusterDesc c = plan::load_cluster(name);
  fmt::print(stderr, "calibrate-host: GPU kernels against {} ...\n", c.source);
  const plan::GpuRates r = plan::measure_gpu_rates(o);
  const plan::EfficiencyTable measured = plan::gpu_efficiencies(c, r);
  c.efficiency.erase("gemm_eta_inf"), c.efficiency.erase("flash_eta"), c.efficiency.erase("mem_eta");
  c.efficiency.insert(measured.begin(), measured.end());
  c.uncertainty = {};
  const std::string header = fmt::format(
      "{}, compute constants measured on {} by `megascale plan --calibrate-host --device cuda`{}:\n"
      "bf16 GEMM {}^3 {:.1f} TFLOP/s, attention forward + backward {:.1f} TFLOP/s (the fused core's FLOPs),\n"
      "LayerNorm {:.0f} GB/s. Communication constants not measured (one GPU): the planner's defaults.",
      c.device.name, r.device, a.quick ? " --quick" : "", r.gemm_dim, r.gemm_tflops, r.attention_tflops,
      r.memory_GBps);
  const std::string text = plan::gpu_cluster_toml(c, header);
  (void)plan::parse_cluster_toml(text, a.out);  // what is written loads back
  write_text_atomic(a.out, text);
  fmt::print("wrote {}\n", a.out);
  return 0;
}

}  // namespace

int run_calibrate_host(const CalibrateHostArgs& a) {
  MS_CHECK(a.device == "cpu" || a.device == "cuda", "plan --calibrate-host: --device '{}' must be cpu or cuda",
           a.device);
  if (a.device == "cuda") return run_calibrate_gpu(a);
  MS_CHECK(a.ranks >= 2, "plan --calibrate-host: --ranks {} (the collectives need >= 2)", a.ranks);
  MS_CHECK(!a.out.empty(), "plan --calibrate-host: --out HOST.toml is required");
  const int cores = omp_get_num_procs();
  plan::CalibrateOptions co;
  co.cores = cores;
  if (a.quick) co.gemm_dims = {64, 256}, co.attention_seq = {128, 256}, co.repeats = 1;
  // The floors first, while this process is small: a spawned child's maximum RSS counts the memory
  // of the process that spawned it (posix_spawn shares it until exec).
  fmt::print(stderr, "calibrate-host: process floors ...\n");
  const auto [process_floor, rank_floor] = measure_floors(a.ranks);
  fmt::print(stderr, "calibrate-host: compute tables on {} cores ...\n", cores);
  plan::HostTables h = plan::measure_host_compute(co);
  h.process_floor_mib = process_floor, h.rank_floor_mib = rank_floor;
  fmt::print(stderr, "calibrate-host: collectives at {} ranks ...\n", a.ranks);
  h.comm = measure_comm(a.ranks, a.quick);

  const HardwarePeak peak = hardware_peak(cores);
  const double fp32 = peak.gflops(DType::kF32) / 1e3, bf16 = peak.gflops(DType::kBF16) / 1e3;
  // The node's link, for the GPU-style fields: Gloo's all-gather at its largest size.
  const plan::CommTable& ag = h.comm["gloo"]["all_gather"];
  const double ag_GBps = ag.bytes.back() * (ag.ranks - 1.0) / ag.ranks / (ag.us.back() * 1e3);
  const double mem_gib = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) / (1 << 30);
  std::string text = fmt::format(
      "# This host, measured by `megascale plan --calibrate-host --ranks {}` on {}{}. A device is a rank;\n"
      "# the tables hold what a rank of t threads computes while the host's other ranks work (plan/host_desc.h).\n"
      "[device]\n"
      "kind = \"cpu\"\n"
      "name = \"{} ({} cores)\"\n"
      "peak_tflops = {{ fp32 = {:.6g}, bf16 = {:.6g} }}  # all cores: clock x FLOP/cycle, measured "
      "(kernels/hw_peak.h)\n"
      "memory_gib = {:.4g}\n"
      "memory_GBps = {:.4g}  # triad on all cores\n"
      "cores = {}\n"
      "comm_engine = \"cores\"  # collectives are CPU work on the ranks' cores\n\n"
      "[node]  # one host: Gloo all-gather over loopback\n"
      "devices_per_node = {}\n"
      "intra_GBps = {:.4g}\n"
      "intra_latency_us = {:.4g}\n\n"
      "[network]  # no network measured: the loopback values\n"
      "nics_per_node = 1\n"
      "nic_Gbps = {:.4g}\n"
      "inter_latency_us = {:.4g}\n"
      "hosts_per_switch = 1\n\n",
      a.ranks, cpu_name(), a.quick ? " (--quick: a small grid)" : "", cpu_name(), cores, fp32, bf16 > 0 ? bf16 : fp32,
      mem_gib, h.by_threads.at(h.threads.back()).kernel_GBps.at("stream"), cores, a.ranks, ag_GBps, ag.us.front(),
      ag_GBps * 8, ag.us.front());
  text += plan::host_tables_toml(h);
  (void)plan::parse_cluster_toml(text, a.out);  // what is written loads back
  write_text_atomic(a.out, text);
  fmt::print("wrote {}\n", a.out);
  return 0;
}

}  // namespace ms
