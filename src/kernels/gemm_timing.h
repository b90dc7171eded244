// gemm_timing: GEMM time accounting for benchmarks (which share of a step is GEMM).
// Off by default: each GEMM then pays one well-predicted branch and no clock read. When on, every
// ms::sgemm and bf16 GEMM (each wrapped in a GemmTimeScope) adds its wall time to one global
// counter. Not thread-safe: GEMMs are issued from the main thread (oneDNN threads inside).
#pragma once
#include "base/clock.h"  // SteadyClock, seconds_since

namespace ms {

void set_gemm_timing(bool on);
bool gemm_timing_enabled();
double gemm_seconds();      // seconds spent inside timed GEMMs since the last reset
void reset_gemm_seconds();
void add_gemm_seconds(double s);

// RAII: times its own lifetime into gemm_seconds() when timing is enabled.
class GemmTimeScope {
 public:
  GemmTimeScope() : on_(gemm_timing_enabled()) {
    if (on_) t0_ = SteadyClock::now();
  }
  ~GemmTimeScope() {
    if (on_) add_gemm_seconds(seconds_since(t0_));
  }
  GemmTimeScope(const GemmTimeScope&) = delete;
  GemmTimeScope& operator=(const GemmTimeScope&) = delete;

 private:
  bool on_;
  SteadyClock::time_point t0_;
};

}  // namespace ms
