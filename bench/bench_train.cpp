// bench_train: training-step throughput of megascale on synthetic data (no data files).
// Builds an ms::Trainer from `--section.key=value` config overrides (ms::set_field), runs warm-up
// steps and timed steps on random token batches, and prints ONE JSON line: median tokens/s, median
// step ms, CPU seconds per step, the per-kernel median ms per step ("kernel_ms", from
// base/kernel_timing.h, with "other" = step - the kernels), the share of step time outside GEMMs
// (fp32 and bf16), peak RSS, model FLOPs per token, precision.
// A config the build does not know (e.g. `--train.precision=bf16` before bf16 lands) prints a JSON
// line with "error" and exits with status 2.
//
// `bench_train --probe` instead measures the machine and prints one JSON line: the hardware peak of
// kernels/hw_peak.h (core clock, FLOP/cycle per core of the fp32 FMA unit and of the bf16 unit in use,
// AMX-BF16 / AVX512-BF16 / fp32 FMA, and cores x FLOP/cycle x clock per precision), /proc/cpuinfo
// "cpu MHz" idle and while the clock is measured, the best fp32 GEMM throughput
// (ms::measure_sgemm_peak_gflops) and the best bf16 GEMM throughput (a oneDNN bf16 matmul, bf16 in /
// f32 out, plain and pre-packed weights).
//
// Usage: bench_train [--bench.warmup=2] [--bench.steps=5] [--model.n_layer=12 ...]
//        bench_train --probe
// Threads: train.threads (default here 2), else OMP_NUM_THREADS.
#include <omp.h>                // omp_set_num_threads, omp_get_max_threads
#include <oneapi/dnnl/dnnl.h>   // dnnl_matmul_* (bf16 GEMM probe)
#include <sys/resource.h>       // getrusage

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>  // clock_gettime
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/check.h"    // ms::Error
#include "base/device.h"   // device_sync, cuda_device_info (train.device = cuda)
#include "config/config.h"   // Config, set_field, list_fields
#include "kernels/gemm_peak.h"    // measure_sgemm_peak_gflops
#include "kernels/hw_peak.h"      // hardware_peak, measure_core_clock_ghz
#include "base/kernel_timing.h"   // set_kernel_timing, kernel_seconds
#include "model/flops.h"          // model_flops_per_token
#include "base/rng.h"      // Rng
#include "base/thread_pin.h"  // pin_omp_threads
#include "train/trainer.h"  // Trainer
#include "base/clock.h"  // steady_seconds

namespace {

using json = nlohmann::ordered_json;  // keys in insertion order (kernel_ms in KernelId order)

double now_s() { return ms::steady_seconds(); }

// Process CPU time, all threads (less skewed than wall time when other processes share the cores).
double process_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // Linux: kilobytes
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- probe: clock and GEMM peaks ----

// Average "cpu MHz" over the cores listed in /proc/cpuinfo (0 if unreadable).
double cpuinfo_mhz() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  double sum = 0;
  int n = 0;
  while (std::getline(f, line))
    if (line.rfind("cpu MHz", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) { sum += std::atof(line.c_str() + p + 1); n++; }
    }
  return n ? sum / n : 0;
}

#define DNNL_OK(call)                                                                        \
  do {                                                                                       \
    dnnl_status_t st_ = (call);                                                             \
    MS_CHECK(st_ == dnnl_success, "{} failed with oneDNN status {}", #call, static_cast<int>(st_)); \
  } while (0)

// Best GFLOP/s of a oneDNN bf16 matmul C(M,N) f32 = A(M,K) bf16 @ B(K,N) bf16. packed_b: let
// oneDNN choose B's (blocked) layout, as for pre-packed weights; else plain row-major B.
double bf16_matmul_gflops(int M, int N, int K, bool packed_b) {
  dnnl_engine_t eng;
  DNNL_OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  dnnl_stream_t stream;
  DNNL_OK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
  dnnl_memory_desc_t a_md, b_md, c_md;
  dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
  DNNL_OK(dnnl_memory_desc_init_by_tag(&a_md, 2, ad, dnnl_bf16, dnnl_ab));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&b_md, 2, bd, dnnl_bf16, packed_b ? dnnl_format_tag_any : dnnl_ab));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&c_md, 2, cd, dnnl_f32, dnnl_ab));
  dnnl_matmul_desc_t desc;
  DNNL_OK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md));
  dnnl_primitive_desc_t pd;
  DNNL_OK(dnnl_primitive_desc_create(&pd, &desc, nullptr, eng, nullptr));
  const dnnl_memory_desc_t* b_real = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  dnnl_primitive_t prim;
  DNNL_OK(dnnl_primitive_create(&prim, pd));
  dnnl_memory_t a, b, c;
  DNNL_OK(dnnl_memory_create(&a, &a_md, eng, DNNL_MEMORY_ALLOCATE));
  DNNL_OK(dnnl_memory_create(&b, b_real, eng, DNNL_MEMORY_ALLOCATE));
  DNNL_OK(dnnl_memory_create(&c, &c_md, eng, DNNL_MEMORY_ALLOCATE));
  for (auto [mem, md] : {std::pair<dnnl_memory_t, const dnnl_memory_desc_t*>{a, &a_md}, {b, b_real}}) {
    void* h = nullptr;
    DNNL_OK(dnnl_memory_get_data_handle(mem, &h));
    auto* p = static_cast<uint16_t*>(h);
    size_t n = dnnl_memory_desc_get_size(md) / 2;
    for (size_t i = 0; i < n; i++) p[i] = 0x3c23;  // ~0.01 in bf16
  }
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
  double best = 0;
  for (int rep = 0; rep < 24; rep++) {
    double t0 = now_s();
    DNNL_OK(dnnl_primitive_execute(prim, stream, 3, args));
    DNNL_OK(dnnl_stream_wait(stream));
    double s = now_s() - t0;
    if (rep > 1) best = std::max(best, 2.0 * M * N * K / s / 1e9);
  }
  dnnl_memory_destroy(a);
  dnnl_memory_destroy(b);
  dnnl_memory_destroy(c);
  dnnl_primitive_destroy(prim);
  dnnl_primitive_desc_destroy(pd);
  dnnl_stream_destroy(stream);
  dnnl_engine_destroy(eng);
  return best;
}

int run_probe() {
  json j;
  const int threads = omp_get_max_threads();
  j["threads"] = threads;
  j["cpuinfo_mhz_idle"] = cpuinfo_mhz();
  // The clock (~0.1 s on every thread): /proc/cpuinfo is read while that load runs.
  double ghz = 0;
  std::thread clock([&] { ghz = ms::measure_core_clock_ghz(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  j["cpuinfo_mhz_under_load"] = cpuinfo_mhz();
  clock.join();
  const ms::HardwarePeak hw = ms::hardware_peak(threads);
  j["clock_ghz_measured"] = ghz;
  j["fp32_unit"] = hw.fp32_unit;
  j["fp32_flop_per_cycle"] = hw.fp32_flop_per_cycle;
  j["bf16_unit"] = hw.bf16_unit;
  j["bf16_flop_per_cycle"] = hw.bf16_flop_per_cycle;
  j["bf16_flop_per_cycle_source"] = hw.bf16_measured ? "measured" : "specification";
  j["fp32_issue_per_cycle"] = hw.fp32_issue_per_cycle;  // before rounding to a power of two
  j["bf16_issue_per_cycle"] = hw.bf16_issue_per_cycle;
  j["fp32_hw_peak_gflops"] = hw.gflops(ms::DType::kF32);
  j["bf16_hw_peak_gflops"] = hw.gflops(ms::DType::kBF16);
  double sgemm = 0;
  for (int i = 0; i < 3; i++) sgemm = std::max(sgemm, ms::measure_sgemm_peak_gflops());  // best of 3: robust to a busy machine
  j["sgemm_peak_gflops"] = sgemm;
  try {
    // The GPT-2 MLP shape of measure_sgemm_peak_gflops: (1024 x 768) @ (768 x 3072).
    double plain = bf16_matmul_gflops(1024, 3072, 768, false);
    double packed = bf16_matmul_gflops(1024, 3072, 768, true);
    j["bf16_gemm_gflops_plain"] = plain;
    j["bf16_gemm_gflops_packed"] = packed;
    j["bf16_gemm_peak_gflops"] = std::max(plain, packed);
  } catch (const ms::Error& e) {
    j["bf16_gemm_error"] = e.what();
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// ---- training benchmark ----

std::string field_value(const ms::Config& cfg, const std::string& key, const std::string& fallback) {
  for (const ms::FieldInfo& f : ms::list_fields(cfg))
    if (f.key == key) return f.value;
  return fallback;
}

// The benchmark's defaults on top of ms::Config's: 2 threads, no sampling, synthetic data.
ms::Config bench_defaults() {
  ms::Config cfg;
  cfg.train.threads = 2;
  cfg.train.sample_tokens = 0;
  cfg.data.train = "(synthetic)";  // random tokens; no data file is read
  return cfg;
}

// Parsed command line: --probe, or config overrides (one value per ms::list_fields entry, empty
// when not given) plus --bench.warmup / --bench.steps.
struct Args {
  bool probe = false;
  int warmup = 2, steps = 5;
  std::vector<ms::FieldInfo> fields;
  std::vector<std::string> values;
  std::vector<bool> given;
};

int run_train(const Args& args) {
  ms::Config cfg = bench_defaults();
  const int warmup = args.warmup, steps = args.steps;
  json out;
  try {
    std::vector<std::pair<std::string, std::string>> overrides;  // model.preset first (apply_overrides)
    for (size_t i = 0; i < args.fields.size(); i++)
      if (args.given[i]) overrides.emplace_back(args.fields[i].key, args.values[i]);
    ms::apply_overrides(cfg, overrides, "command line");
    MS_CHECK(steps >= 1 && warmup >= 0, "bench.steps must be >= 1 and bench.warmup >= 0");
    cfg.train.steps = warmup + steps;
    cfg.validate();
  } catch (const std::exception& e) {
    out["error"] = e.what();
    std::printf("%s\n", out.dump().c_str());
    return 2;
  }
  omp_set_num_threads(cfg.train.threads > 0 ? cfg.train.threads : omp_get_max_threads());
  if (cfg.train.pin_threads) out["pinning"] = ms::pin_omp_threads();

  const int B = cfg.train.batch_size, T = cfg.train.seq_len, V = cfg.model.vocab_size;
  const double tokens_per_step = static_cast<double>(B) * T * cfg.train.grad_accum;
  ms::Trainer trainer(cfg);
  ms::Rng rng(static_cast<uint64_t>(cfg.train.seed), /*stream=*/0xbe9c);
  auto next = [&](int* in, int* tg) {
    for (int i = 0; i < B * T; i++) {
      in[i] = static_cast<int>(rng.next_u64() % static_cast<uint64_t>(V));
      tg[i] = static_cast<int>(rng.next_u64() % static_cast<uint64_t>(V));
    }
  };
  // A GPU step ends when the device is idle (the update is asynchronous): timed steps wait for it.
  const bool gpu = cfg.train.device == ms::Device::kCuda;
  auto step = [&] {
    ms::StepStats st = trainer.train_step(next);
    if (gpu) ms::device_sync();
    return st;
  };
  for (int s = 0; s < warmup; s++) step();

  std::vector<double> step_s, cpu_s, gemm_share;
  std::vector<std::vector<double>> kernel_ms(ms::kNumKernels + 1);  // per kernel, then "other"
  double loss = 0;
  ms::set_kernel_timing(true);
  for (int s = 0; s < steps; s++) {
    ms::reset_kernel_seconds();
    double t0 = now_s(), c0 = process_cpu_s();
    ms::StepStats st = step();
    double dt = now_s() - t0;
    cpu_s.push_back(process_cpu_s() - c0);
    step_s.push_back(dt);
    double sum = 0;
    for (int k = 0; k < ms::kNumKernels; k++) {
      const double ks = ms::kernel_seconds(static_cast<ms::KernelId>(k));
      kernel_ms[k].push_back(ks * 1e3);
      sum += ks;
    }
    kernel_ms[ms::kNumKernels].push_back((dt - sum) * 1e3);
    gemm_share.push_back((ms::kernel_seconds(ms::KernelId::kGemmFp32) + ms::kernel_seconds(ms::KernelId::kGemmBf16)) / dt);
    loss = st.loss;
  }
  ms::set_kernel_timing(false);

  const double med = median(step_s);
  out["engine"] = "megascale";
  out["precision"] = field_value(cfg, "train.precision", "fp32");
  out["threads"] = omp_get_max_threads();
  out["B"] = B;
  out["T"] = T;
  out["n_layer"] = cfg.model.n_layer;
  out["n_embd"] = cfg.model.n_embd;
  out["vocab_size"] = V;
  out["block"] = ms::config_name(cfg.model.block);
  out["family"] = {{"norm", ms::config_name(cfg.model.norm)}, {"positions", ms::config_name(cfg.model.positions)},
                   {"mlp", ms::config_name(cfg.model.mlp)}, {"n_head", cfg.model.n_head},
                   {"n_kv_head", cfg.model.kv_heads()}, {"ffn", cfg.model.ffn()},
                   {"tie_embeddings", cfg.model.tie_embeddings}, {"bias", ms::config_name(cfg.model.bias)}};
  out["recompute"] = ms::config_name(cfg.model.recompute);
  out["recompute_every"] = cfg.model.recompute_every;
  out["attention"] = ms::config_name(cfg.model.attention);
  out["window"] = cfg.model.attention == ms::AttentionKind::kSliding ? cfg.model.window : 0;
  out["params"] = trainer.model().num_params();
  out["warmup"] = warmup;
  out["steps"] = steps;
  out["step_ms_median"] = med * 1e3;
  out["step_ms_all"] = [&] { std::vector<double> v; for (double s : step_s) v.push_back(s * 1e3); return v; }();
  out["tokens_per_s_median"] = tokens_per_step / med;
  out["cpu_s_per_step_median"] = median(cpu_s);
  out["tokens_per_cpu_s_median"] = tokens_per_step / median(cpu_s);
  // Median ms per step of each kernel (exclusive time, base/kernel_timing.h) and of the rest.
  json kms = json::object();
  for (int k = 0; k <= ms::kNumKernels; k++)
    kms[k < ms::kNumKernels ? ms::kernel_name(static_cast<ms::KernelId>(k)) : "other"] = median(kernel_ms[k]);
  out["kernel_ms"] = kms;
  out["gemm_share_median"] = median(gemm_share);  // fp32 and bf16 GEMMs
  out["non_gemm_share_median"] = 1.0 - median(gemm_share);
  out["peak_rss_mb"] = peak_rss_mb();
  // The memory accounting's view of the same model (model/gpt_activations.h; what the planner uses).
  const ms::GPT::Footprint fp = trainer.model().footprint();
  out["planned_activations_mb"] = 4.0 * static_cast<double>(fp.activations) / 1048576.0;
  out["planned_params_grads_mb"] = 4.0 * static_cast<double>(fp.params + fp.grads) / 1048576.0;
  out["flops_per_token"] = ms::model_flops_per_token(cfg.model, T);
  out["last_loss"] = loss;
  out["device"] = ms::device_name(cfg.train.device);
  if (gpu) {  // MFU against the card's peak (kernels/hw_peak.h gpu_peak); kernel_ms are enqueue times there
    const ms::GpuPeak peak = ms::gpu_peak();
    const double tflops = ms::model_flops_per_token(cfg.model, T) * tokens_per_step / med / 1e12;
    out["gpu"] = ms::cuda_device_info().name;
    out["gpu_peak_tflops"] = peak.gflops(cfg.train.precision) / 1e3;
    out["model_tflops"] = tflops;
    out["mfu"] = peak.gflops(cfg.train.precision) > 0 ? tflops * 1e3 / peak.gflops(cfg.train.precision) : 0.0;
    out["device_allocations"] = ms::device_allocations();
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  args.fields = ms::list_fields(bench_defaults());
  args.values.resize(args.fields.size());
  args.given.resize(args.fields.size());
  CLI::App app{"bench_train: training-step throughput on synthetic data (one JSON line), or --probe the machine"};
  app.add_flag("--probe", args.probe, "measure the hardware peak (clock, FLOP/cycle) and the GEMM peaks instead");
  std::vector<CLI::Option*> others;
  others.push_back(app.add_option("--bench.warmup", args.warmup, "untimed steps first")->capture_default_str());
  others.push_back(app.add_option("--bench.steps", args.steps, "timed steps")->capture_default_str());
  for (size_t i = 0; i < args.fields.size(); i++) {
    const ms::FieldInfo& f = args.fields[i];
    others.push_back(app.add_option("--" + f.key, args.values[i], fmt::format("{} (default: {})", f.doc, f.value))
                         ->group(f.key.substr(0, f.key.find('.'))));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Callers read one JSON line: a bad argument (e.g. a config key this build does not know) is
    // an "error" line and status 2, like a bad config value.
    json j;
    j["error"] = e.what();
    std::printf("%s\n", j.dump().c_str());
    return 2;
  }
  for (size_t i = 0; i < args.fields.size(); i++) args.given[i] = app.count("--" + args.fields[i].key) > 0;
  try {
    if (args.probe) {
      for (const CLI::Option* o : others)
        MS_CHECK(o->count() == 0, "--probe takes no other argument (got {})", o->get_name());
      return run_probe();
    }
    return run_train(args);
  } catch (const std::exception& e) {
    json j;
    j["error"] = e.what();
    std::printf("%s\n", j.dump().c_str());
    return 2;
  }
}
