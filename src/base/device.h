// device: the memory and stream vocabulary of a second device (an NVIDIA GPU) beside the host.
// A Device tag, opaque Stream/Event handles (cudaStream_t / cudaEvent_t underneath; a default
// Stream{} is the legacy default stream), device memory (cudaMalloc, never managed memory),
// copies between host and device, and a counter of device allocations (a test can assert that
// none happen after warm-up: the malloc interposer of the CPU tests cannot see cudaMalloc).
// Guarantees:
//  - cuda_available() is false, never an exception, on ANY cudaGetDeviceCount error (e.g. a
//    driver older than the runtime, which is the case on the CI machine) and on 0 devices;
//    cuda_unavailable_reason() then names the failing call and its error string.
//  - A build without MEGASCALE_WITH_CUDA compiles and links all of this: every call that needs
//    a device throws ms::Error "built without MEGASCALE_WITH_CUDA" (require_device names it too).
//  - Every CUDA call is checked (base/cuda_check.h): a failure throws ms::Error naming
//    file:line, the call as written and the CUDA error.
// Only device_cuda.cpp (built with CUDA) includes the CUDA headers; this header does not.
#pragma once
#include <cstddef>  // size_t
#include <cstdint>  // uint8_t
#include <memory>   // std::shared_ptr
#include <string>
#include <utility>  // std::exchange

namespace ms {

enum class Device : uint8_t { kCpu, kCuda };
const char* device_name(Device d);  // "cpu" | "cuda"

struct Stream { void* handle = nullptr; };  // cudaStream_t; {} = the default stream
struct Event { void* handle = nullptr; };   // cudaEvent_t

bool cuda_built();                      // compiled with MEGASCALE_WITH_CUDA
bool cuda_available();                  // built, and at least one device opens (cached)
std::string cuda_unavailable_reason();  // "" when available
// Throws a named ms::Error unless `d` can be used here (cpu always; cuda: built and available).
void require_device(Device d);
// Makes GPU (local_rank modulo the GPUs this process sees) the calling thread's current device,
// for the process's first CUDA work (one GPU per local rank; several ranks share one when there are
// fewer GPUs). Returns the device index.
int select_cuda_device(int local_rank);
// Makes the device select_cuda_device chose the calling thread's current device (CUDA's current
// device is per thread): threads that start CUDA work of their own (communication, checkpoint
// copies) call it first. No-op when none was selected or without CUDA.
void bind_selected_device();
// Name, SMs, clock (kHz) and memory of device 0 ("" fields when unavailable); for reports.
struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int clock_khz = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_mem = 0;
};
DeviceInfo cuda_device_info();

Stream stream_create();
void stream_destroy(Stream s);
void stream_sync(Stream s);
Event event_create();
void event_destroy(Event e);
void event_record(Event e, Stream s);
void stream_wait(Stream s, Event e);
// An event recorded on s now, owned by the returned pointer (its cudaEvent_t; destroyed with the
// last owner): the form that crosses threads (a collective's producer, a checkpoint's copy).
std::shared_ptr<void> record_shared_event(Stream s);
float event_elapsed_ms(Event start, Event stop);  // stop must have completed (event_sync)
void event_sync(Event e);
// True when the work the event records has completed (cudaEventQuery), never blocks; a CUDA error
// other than "not ready" throws.
bool event_query(Event e);
void device_sync();

void* device_malloc(size_t bytes);  // cudaMalloc; counted; bytes == 0 gives nullptr
void device_free(void* p);          // nullptr is fine
size_t device_allocations();        // cudaMalloc calls so far in this process
// Page-locked host memory (cudaMallocHost): the host side of asynchronous copies (communication
// staging, checkpoint snapshots). bytes == 0 gives nullptr; pinned_free(nullptr) is fine.
void* pinned_alloc(size_t bytes);
void pinned_free(void* p);
// Page-locks / releases existing host memory (cudaHostRegister), e.g. a buffer that device copies
// target; nullptr or 0 bytes: nothing.
void pin_host_memory(void* p, size_t bytes);
void unpin_host_memory(void* p);

// Copies `bytes` between host and device memory (either side either device); async on `s` when a
// side is the device (the host side should then stay alive until the stream is synchronised).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes, Stream s = {});
// Sets `bytes` bytes at device pointer p to `value` (cudaMemsetAsync).
void device_memset(void* p, int value, size_t bytes, Stream s = {});

// Owning device array of n T (uninitialised). Move-only; freed on destruction.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      device_free(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { device_free(p_); }
  // Reallocates only when n differs from the current size; contents are not kept.
  void resize(size_t n) {
    if (n == n_) return;
    device_free(p_);
    p_ = nullptr;
    n_ = 0;
    p_ = static_cast<T*>(device_malloc(n * sizeof(T)));
    n_ = n;
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  void upload(const T* host, size_t n, Stream s = {}) { copy_bytes(p_, Device::kCuda, host, Device::kCpu, n * sizeof(T), s); }
  void download(T* host, size_t n, Stream s = {}) const { copy_bytes(host, Device::kCpu, p_, Device::kCuda, n * sizeof(T), s); }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Called by the checked-call macros (base/cuda_check.h, kernels/cuda/): throws ms::Error
// "file:line: call failed: error (code)".
[[noreturn]] void device_call_failed(const char* file, int line, const char* call, int code, const char* what);

}  // namespace ms
