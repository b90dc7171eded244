// aligned: 64-byte aligned, zero-initialised, fixed-size buffers for tensors and kernel scratch.
// Allocation happens once (construction or resize); hot paths only index into them.
#pragma once
#include <cstddef>  // size_t
#include <cstdlib>  // std::aligned_alloc, std::free
#include <cstring>  // std::memset
#include <new>      // std::bad_alloc
#include <utility>  // std::exchange

namespace ms {

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) { std::free(ptr_); ptr_ = std::exchange(o.ptr_, nullptr); n_ = std::exchange(o.n_, 0); }
    return *this;
  }
  ~AlignedBuffer() { std::free(ptr_); }

  // Reallocates (contents zeroed) when the size changes; a no-op otherwise.
  void resize(size_t n) {
    if (n == n_ && ptr_) return;
    std::free(ptr_);
    ptr_ = nullptr;
    n_ = n;
    size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    if (bytes == 0) bytes = 64;
    ptr_ = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (!ptr_) throw std::bad_alloc();
    std::memset(static_cast<void*>(ptr_), 0, bytes);
  }
  void zero() { if (ptr_) std::memset(static_cast<void*>(ptr_), 0, n_ * sizeof(T)); }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return ptr_[i]; }
  const T& operator[](size_t i) const { return ptr_[i]; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

}  // namespace ms
