// device_cuda.cpp: device.h over the CUDA runtime (built only with MEGASCALE_WITH_CUDA; compiled
// by the host compiler against cuda_runtime.h, linked with the static runtime).
#include <atomic>
#include <cstring>  // std::memcpy

#include "base/cuda_check.h"  // MS_CUDA_CHECK
#include "base/device.h"

namespace ms {
namespace {
std::atomic<size_t> g_allocations{0};

struct Probe {
  bool ok = false;
  std::string reason;
};
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      r.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
      (void)cudaGetLastError();  // clear the sticky-free error so later calls are not confused
    } else if (n == 0) {
      r.reason = "cudaGetDeviceCount: 0 devices";
    } else {
      const cudaError_t f = cudaFree(nullptr);  // opens the context: a failing driver shows here
      if (f != cudaSuccess) {
        r.reason = std::string("cudaFree(0) (context creation): ") + cudaGetErrorName(f) + ": " + cudaGetErrorString(f);
        (void)cudaGetLastError();
      } else {
        r.ok = true;
      }
    }
    return r;
  }();
  return p;
}
cudaStream_t st(Stream s) { return static_cast<cudaStream_t>(s.handle); }
cudaEvent_t ev(Event e) { return static_cast<cudaEvent_t>(e.handle); }
cudaMemcpyKind kind(Device dd, Device sd) {
  if (dd == Device::kCuda) return sd == Device::kCuda ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice;
  return sd == Device::kCuda ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost;
}
}  // namespace

bool cuda_built() { return true; }
bool cuda_available() { return probe().ok; }
std::string cuda_unavailable_reason() { return probe().reason; }

DeviceInfo cuda_device_info() {
  DeviceInfo d;
  if (!cuda_available()) return d;
  cudaDeviceProp p{};
  MS_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.total_mem = p.totalGlobalMem;
  // CUDA 13 dropped cudaDeviceProp::clockRate: the attribute is the way.
  MS_CUDA_CHECK(cudaDeviceGetAttribute(&d.clock_khz, cudaDevAttrClockRate, 0));
  return d;
}

namespace {
std::atomic<int> g_selected{-1};  // select_cuda_device's choice
}  // namespace

int select_cuda_device(int local_rank) {
  require_device(Device::kCuda);
  int n = 0;
  MS_CUDA_CHECK(cudaGetDeviceCount(&n));
  const int d = (local_rank % n + n) % n;
  MS_CUDA_CHECK(cudaSetDevice(d));
  g_selected.store(d);
  return d;
}

void bind_selected_device() {
  const int d = g_selected.load();
  if (d >= 0) MS_CUDA_CHECK(cudaSetDevice(d));
}

Stream stream_create() {
  cudaStream_t s = nullptr;
  MS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream{s};
}
void stream_destroy(Stream s) {
  if (s.handle) MS_CUDA_CHECK(cudaStreamDestroy(st(s)));
}
void stream_sync(Stream s) { MS_CUDA_CHECK(cudaStreamSynchronize(st(s))); }
Event event_create() {
  cudaEvent_t e = nullptr;
  MS_CUDA_CHECK(cudaEventCreate(&e));
  return Event{e};
}
void event_destroy(Event e) {
  if (e.handle) MS_CUDA_CHECK(cudaEventDestroy(ev(e)));
}
void event_record(Event e, Stream s) { MS_CUDA_CHECK(cudaEventRecord(ev(e), st(s))); }
void stream_wait(Stream s, Event e) { MS_CUDA_CHECK(cudaStreamWaitEvent(st(s), ev(e), 0)); }
std::shared_ptr<void> record_shared_event(Stream s) {
  const Event e = event_create();
  std::shared_ptr<void> owned(e.handle, [](void* h) { event_destroy(Event{h}); });
  event_record(e, s);
  return owned;
}
float event_elapsed_ms(Event start, Event stop) {
  float ms = 0.f;
  MS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev(start), ev(stop)));
  return ms;
}
void event_sync(Event e) { MS_CUDA_CHECK(cudaEventSynchronize(ev(e))); }
bool event_query(Event e) {
  const cudaError_t r = cudaEventQuery(ev(e));
  if (r == cudaErrorNotReady) return false;
  MS_CUDA_CHECK(r);
  return true;
}
void device_sync() { MS_CUDA_CHECK(cudaDeviceSynchronize()); }

void* device_malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  require_device(Device::kCuda);
  void* p = nullptr;
  MS_CUDA_CHECK(cudaMalloc(&p, bytes));  // plain device memory, never managed memory
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return p;
}
void device_free(void* p) {
  if (!p) return;
  const cudaError_t e = cudaFree(p);
  // At process exit the runtime may be gone before a static buffer: nothing left to free, and a
  // destructor must not throw.
  if (e == cudaErrorCudartUnloading || e == cudaErrorContextIsDestroyed) {
    (void)cudaGetLastError();
    return;
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    device_call_failed(__FILE__, __LINE__, "cudaFree(p)", static_cast<int>(e), cudaGetErrorString(e));
  }
}
size_t device_allocations() { return g_allocations.load(std::memory_order_relaxed); }

void pin_host_memory(void* p, size_t bytes) {
  if (p && bytes) MS_CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterDefault));
}
void unpin_host_memory(void* p) {
  if (!p) return;
  const cudaError_t e = cudaHostUnregister(p);
  if (e != cudaSuccess) (void)cudaGetLastError();  // at exit, or never registered: nothing to undo
}

void* pinned_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  require_device(Device::kCuda);
  void* p = nullptr;
  MS_CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}
void pinned_free(void* p) {
  if (!p) return;
  const cudaError_t e = cudaFreeHost(p);
  if (e == cudaErrorCudartUnloading || e == cudaErrorContextIsDestroyed) {  // at exit, as device_free
    (void)cudaGetLastError();
    return;
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    device_call_failed(__FILE__, __LINE__, "cudaFreeHost(p)", static_cast<int>(e), cudaGetErrorString(e));
  }
}

void copy_bytes(void* dst, Device dd, const void* src, Device sd, size_t bytes, Stream s) {
  if (bytes == 0) return;
  if (dd == Device::kCpu && sd == Device::kCpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
  MS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind(dd, sd), st(s)));
}
void device_memset(void* p, int value, size_t bytes, Stream s) {
  if (bytes) MS_CUDA_CHECK(cudaMemsetAsync(p, value, bytes, st(s)));
}

}  // namespace ms
