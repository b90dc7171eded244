// aligned: 64-byte aligned, zero-initialised, fixed-size buffers for tensors and kernel scratch.
// Allocation happens once (construction or resize); hot paths only index into them. Buffers of
// 1 MiB and more are anonymous mappings: the kernel's pages are zero already and are touched only
// when first used (a restart's 100s of MiB of state buffers cost no memset pass before they are
// filled); smaller ones come from the heap and are zeroed here.
// Huge pages (set_huge_buffer_pages, train.huge_pages): mappings of 2 MiB and more are then advised
// MADV_HUGEPAGE, so the kernel backs them with 2 MiB pages where it can: a process of GBs of state
// ends in milliseconds instead of ~0.1 s per GiB of 4 KiB pages, and refills recycled pages with
// 512x fewer faults; the price, measured on this VM, is a slower first touch of memory no process
// used before (docs/performance.md, "Recovery"). Where the kernel has no transparent huge pages the
// advice fails and is ignored: the buffers work the same, on 4 KiB pages.
#pragma once
#include <sys/mman.h>  // mmap, munmap

#include <atomic>
#include <cstddef>  // size_t
#include <cstdlib>  // std::aligned_alloc, std::free
#include <cstring>  // std::memset
#include <new>      // std::bad_alloc
#include <utility>  // std::exchange

namespace ms {

namespace detail {
inline std::atomic<bool> g_huge_buffer_pages{false};
inline std::atomic<size_t> g_huge_advised_bytes{0};
}
// Whether buffers allocated from now on ask for transparent huge pages (2 MiB and larger ones).
inline void set_huge_buffer_pages(bool on) { detail::g_huge_buffer_pages.store(on, std::memory_order_relaxed); }
inline bool huge_buffer_pages() { return detail::g_huge_buffer_pages.load(std::memory_order_relaxed); }
// Bytes of the live buffers the kernel took the advice for (0 where it has no transparent huge pages).
inline size_t huge_advised_bytes() { return detail::g_huge_advised_bytes.load(std::memory_order_relaxed); }

template <typename T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t n) { resize(n); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)), mapped_(std::exchange(o.mapped_, 0)),
        huge_(std::exchange(o.huge_, false)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr), n_ = std::exchange(o.n_, 0), mapped_ = std::exchange(o.mapped_, 0);
      huge_ = std::exchange(o.huge_, false);
    }
    return *this;
  }
  ~AlignedBuffer() { release(); }

  // Reallocates (contents zeroed) when the size changes; a no-op otherwise.
  void resize(size_t n) {
    if (n == n_ && ptr_) return;
    release();
    size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    if (bytes == 0) bytes = 64;
    if (bytes >= kMapBytes) {  // page-aligned, zero-filled by the kernel on first touch
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      if (bytes >= kHugeBytes && huge_buffer_pages() && ::madvise(p, bytes, MADV_HUGEPAGE) == 0) {  // advice only
        huge_ = true;
        detail::g_huge_advised_bytes.fetch_add(bytes, std::memory_order_relaxed);
      }
      ptr_ = static_cast<T*>(p), mapped_ = bytes;
    } else {
      ptr_ = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (!ptr_) throw std::bad_alloc();
      std::memset(static_cast<void*>(ptr_), 0, bytes);
    }
    n_ = n;
  }
  void zero() { if (ptr_) std::memset(static_cast<void*>(ptr_), 0, n_ * sizeof(T)); }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return ptr_[i]; }
  const T& operator[](size_t i) const { return ptr_[i]; }

 private:
  static constexpr size_t kMapBytes = size_t{1} << 20;
  static constexpr size_t kHugeBytes = size_t{2} << 20;
  void release() {
    if (huge_) detail::g_huge_advised_bytes.fetch_sub(mapped_, std::memory_order_relaxed);
    huge_ = false;
    if (mapped_) ::munmap(ptr_, mapped_);
    else std::free(ptr_);
    ptr_ = nullptr, n_ = 0, mapped_ = 0;
  }
  T* ptr_ = nullptr;
  size_t n_ = 0;
  size_t mapped_ = 0;  // bytes mapped (0: heap)
  bool huge_ = false;  // advised MADV_HUGEPAGE (counted in huge_advised_bytes)
};

}  // namespace ms
