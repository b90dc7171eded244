// gemm_timing.cpp: see gemm_timing.h.
#include "kernels/gemm_timing.h"

namespace ms {

namespace {
bool g_gemm_timing = false;
double g_gemm_seconds = 0;
}  // namespace

void set_gemm_timing(bool on) { g_gemm_timing = on; }
bool gemm_timing_enabled() { return g_gemm_timing; }
double gemm_seconds() { return g_gemm_seconds; }
void reset_gemm_seconds() { g_gemm_seconds = 0; }
void add_gemm_seconds(double s) { g_gemm_seconds += s; }

}  // namespace ms
