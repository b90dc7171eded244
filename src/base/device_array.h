// device_array: a fixed-size array of T that lives on one device: host memory (AlignedBuffer: 64-byte
// aligned) for Device::kCpu, device memory (DeviceBuffer: cudaMalloc, counted) for Device::kCuda.
// The tensors of a model that may run on either device are these. Contents are zero after every
// resize that changes the size, on both devices. Host code must not dereference data() of a kCuda
// array: copy through download / upload (base/device.h copy_bytes) instead.
#pragma once
#include <cstddef>  // size_t

#include "base/aligned.h"  // AlignedBuffer
#include "base/device.h"   // Device, DeviceBuffer, copy_bytes, device_memset

namespace ms {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  // Allocates n elements on device d (zeroed); a no-op when both already match.
  void resize(size_t n, Device d) {
    if (n == size() && d == device_ && data()) return;
    host_ = AlignedBuffer<T>();
    dev_ = DeviceBuffer<T>();
    device_ = d;
    if (d == Device::kCpu) {
      host_.resize(n);
    } else {
      dev_.resize(n);
      if (n) device_memset(dev_.data(), 0, n * sizeof(T));
    }
  }
  Device device() const { return device_; }
  T* data() { return device_ == Device::kCpu ? host_.data() : dev_.data(); }
  const T* data() const { return device_ == Device::kCpu ? host_.data() : dev_.data(); }
  size_t size() const { return device_ == Device::kCpu ? host_.size() : dev_.size(); }
  void zero() {
    if (device_ == Device::kCpu) host_.zero();
    else if (size()) device_memset(dev_.data(), 0, size() * sizeof(T));
  }
  // Elements [at, at + n) to / from host memory (synchronous with respect to the host).
  void download(T* host, size_t n, size_t at = 0) const {
    copy_bytes(host, Device::kCpu, data() + at, device_, n * sizeof(T));
    if (device_ == Device::kCuda) stream_sync({});
  }
  void upload(const T* host, size_t n, size_t at = 0) {
    copy_bytes(data() + at, device_, host, Device::kCpu, n * sizeof(T));
    if (device_ == Device::kCuda) stream_sync({});
  }

 private:
  Device device_ = Device::kCpu;
  AlignedBuffer<T> host_;
  DeviceBuffer<T> dev_;
};

}  // namespace ms
