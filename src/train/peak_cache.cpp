// peak_cache.cpp: see peak_cache.h.
#include "train/peak_cache.h"

#include <unistd.h>  // gethostname

#include <fstream>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"  // write_text_atomic

namespace ms {

namespace {
// What ties a measurement to a machine: its host name and CPU model (/proc/cpuinfo "model name").
std::string machine_key() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::string model;
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 1);
      break;
    }
  return std::string(host) + "|" + model;
}
}  // namespace

std::optional<MeasuredPeaks> read_peak_cache(const std::string& path, int threads, DType precision) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("machine", "") != machine_key() || j.value("threads", -1) != threads ||
      j.value("precision", "") != dtype_name(precision))
    return std::nullopt;
  MeasuredPeaks p;
  HardwarePeak& h = p.hw;
  h.cores = threads;
  h.clock_ghz = j.value("clock_ghz", 0.0);
  h.fp32_flop_per_cycle = j.value("fp32_flop_per_cycle", 0.0);
  h.bf16_flop_per_cycle = j.value("bf16_flop_per_cycle", 0.0);
  h.fp32_unit = j.value("fp32_unit", "");
  h.bf16_unit = j.value("bf16_unit", "");
  h.bf16_measured = j.value("bf16_measured", false);
  h.fp32_issue_per_cycle = j.value("fp32_issue_per_cycle", 0.0);
  h.bf16_issue_per_cycle = j.value("bf16_issue_per_cycle", 0.0);
  p.gemm_gflops = j.value("gemm_gflops", 0.0);
  if (!(h.clock_ghz > 0) || !(p.gemm_gflops > 0)) return std::nullopt;
  return p;
}

void write_peak_cache(const std::string& path, int threads, DType precision, const MeasuredPeaks& p) {
  const HardwarePeak& h = p.hw;
  const nlohmann::json j = {{"machine", machine_key()},
                            {"threads", threads},
                            {"precision", dtype_name(precision)},
                            {"clock_ghz", h.clock_ghz},
                            {"fp32_flop_per_cycle", h.fp32_flop_per_cycle},
                            {"bf16_flop_per_cycle", h.bf16_flop_per_cycle},
                            {"fp32_unit", h.fp32_unit},
                            {"bf16_unit", h.bf16_unit},
                            {"bf16_measured", h.bf16_measured},
                            {"fp32_issue_per_cycle", h.fp32_issue_per_cycle},
                            {"bf16_issue_per_cycle", h.bf16_issue_per_cycle},
                            {"gemm_gflops", p.gemm_gflops}};
  try {
    write_text_atomic(path, j.dump(1));
  } catch (const std::exception&) {
    // Not fatal: the next restart measures again.
  }
}

}  // namespace ms
