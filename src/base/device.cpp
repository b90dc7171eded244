// device.cpp: see device.h. What every build has; the CUDA implementations live in
// device_cuda.cpp (built with MEGASCALE_WITH_CUDA only), and a build without CUDA gets the
// stubs at the bottom, each a named error.
#include "base/device.h"

#include <cstring>  // std::memcpy

#include <fmt/format.h>

#include "base/check.h"  // ms::Error, MS_FAIL

namespace ms {

const char* device_name(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

void device_call_failed(const char* file, int line, const char* call, int code, const char* what) {
  throw Error(fmt::format("{}:{}: {} failed: {} (error {})", file, line, call, what, code));
}

void require_device(Device d) {
  if (d == Device::kCpu) return;
  if (!cuda_built())
    MS_FAIL("device cuda asked for, but megascale was built without MEGASCALE_WITH_CUDA "
            "(configure with -DMEGASCALE_WITH_CUDA=ON where nvcc is installed)");
  if (!cuda_available()) MS_FAIL("device cuda asked for, but no CUDA device opens: {}", cuda_unavailable_reason());
}

#ifndef MEGASCALE_HAVE_CUDA
namespace {
[[noreturn]] void no_cuda(const char* what) {
  MS_FAIL("{}: megascale was built without MEGASCALE_WITH_CUDA", what);
}
}  // namespace

bool cuda_built() { return false; }
bool cuda_available() { return false; }
std::string cuda_unavailable_reason() { return "built without MEGASCALE_WITH_CUDA"; }
DeviceInfo cuda_device_info() { return {}; }
int select_cuda_device(int) { no_cuda("select_cuda_device"); }
void bind_selected_device() {}
Stream stream_create() { no_cuda("stream_create"); }
void stream_destroy(Stream) {}
void stream_sync(Stream) { no_cuda("stream_sync"); }
Event event_create() { no_cuda("event_create"); }
void event_destroy(Event) {}
void event_record(Event, Stream) { no_cuda("event_record"); }
void stream_wait(Stream, Event) { no_cuda("stream_wait"); }
std::shared_ptr<void> record_shared_event(Stream) { no_cuda("record_shared_event"); }
float event_elapsed_ms(Event, Event) { no_cuda("event_elapsed_ms"); }
void event_sync(Event) { no_cuda("event_sync"); }
bool event_query(Event) { no_cuda("event_query"); }
void device_sync() { no_cuda("device_sync"); }
void* device_malloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  no_cuda("device_malloc");
}
void device_free(void*) {}
size_t device_allocations() { return 0; }
void* pinned_alloc(size_t bytes) {
  if (bytes == 0) return nullptr;
  no_cuda("pinned_alloc");
}
void pinned_free(void*) {}
void pin_host_memory(void* p, size_t bytes) {
  if (p && bytes) no_cuda("pin_host_memory");
}
void unpin_host_memory(void*) {}
void copy_bytes(void* dst, Device dd, const void* src, Device sd, size_t bytes, Stream) {
  if (dd == Device::kCuda || sd == Device::kCuda) no_cuda("copy_bytes");
  if (bytes) std::memcpy(dst, src, bytes);
}
void device_memset(void*, int, size_t, Stream) { no_cuda("device_memset"); }
#endif

}  // namespace ms
