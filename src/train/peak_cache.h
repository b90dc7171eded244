// peak_cache: the MFU denominators rank 0 measured (kernels/hw_peak.h's hardware peak and the GEMM
// peak, ~0.3-0.8 s of probes on busy cores), kept in <out_dir>/peaks.json so that a restart of the
// same job skips the probes: recovery time is spent on training, not on measuring the machine again.
// The cache is used only on a restart ($MEGASCALE_RESTART_COUNT > 0: a fresh `megascale train`
// always measures) and only when it was measured on the same host name and CPU model, with the same
// threads and precision; anything else (missing, malformed, another machine) measures again.
#pragma once
#include <optional>
#include <string>

#include "base/dtype.h"        // DType
#include "kernels/hw_peak.h"   // HardwarePeak

namespace ms {

struct MeasuredPeaks {
  HardwarePeak hw;
  double gemm_gflops = 0;
};

// The cached peaks of `path` when they apply to this machine, `threads` and `precision`.
std::optional<MeasuredPeaks> read_peak_cache(const std::string& path, int threads, DType precision);
// Writes them (atomically); a failure to write is not an error (the next restart measures).
void write_peak_cache(const std::string& path, int threads, DType precision, const MeasuredPeaks& p);

}  // namespace ms
