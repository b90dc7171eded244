// gpu_peak.cpp: hw_peak.h's GPU peak, from the card's attributes (base/device.h cuda_device_info).
#include "base/device.h"   // cuda_available, cuda_device_info
#include "kernels/hw_peak.h"

namespace ms {

GpuPeak gpu_peak() {
  GpuPeak p;
  if (!cuda_available()) return p;
  const DeviceInfo d = cuda_device_info();
  p.sm_count = d.sm_count;
  p.clock_ghz = d.clock_khz * 1e-6;
  if (d.cc_major == 9) {  // Hopper: H100 / H200 (NVIDIA H100 whitepaper, per-SM dense throughput)
    p.bf16_flop_per_sm_clock = 4096;
    p.fp32_flop_per_sm_clock = 256;
  }
  return p;
}

}  // namespace ms
