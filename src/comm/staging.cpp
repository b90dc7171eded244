// staging.cpp: see staging.h.
#include "comm/staging.h"

#include <algorithm>  // std::min, std::max
#include <cstdint>    // uintptr_t
#include <cstdlib>    // std::aligned_alloc, std::free

#include "base/check.h"

namespace ms {

namespace {
constexpr size_t kAlign = 64;
size_t round_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
bool inside(const StageRange& r, const void* p) { return r.p && addr(p) >= addr(r.p) && addr(p) <= addr(r.p) + r.bytes; }
}  // namespace

// Free host blocks by capacity; blocks are pinned for kCuda, aligned host memory otherwise.
struct HostStaging::Pool {
  Device device;
  std::mutex m;
  std::vector<std::pair<size_t, char*>> free;
  size_t allocated = 0;

  explicit Pool(Device d) : device(d) {}
  ~Pool() {
    for (auto& [cap, p] : free) release(p);
  }
  void release(char* p) const {
    if (device == Device::kCuda) pinned_free(p);
    else std::free(p);
  }
  std::pair<size_t, char*> take(size_t bytes) {
    {
      std::lock_guard lk(m);
      // The smallest free block that fits.
      auto best = free.end();
      for (auto it = free.begin(); it != free.end(); ++it)
        if (it->first >= bytes && (best == free.end() || it->first < best->first)) best = it;
      if (best != free.end()) {
        auto b = *best;
        free.erase(best);
        return b;
      }
      allocated++;
    }
    const size_t cap = round_up(std::max<size_t>(bytes, kAlign));
    char* p = device == Device::kCuda ? static_cast<char*>(pinned_alloc(cap))
                                      : static_cast<char*>(std::aligned_alloc(kAlign, cap));
    MS_CHECK(p, "comm staging: cannot allocate {} bytes of host memory", cap);
    return {cap, p};
  }
  void give(size_t cap, char* p) {
    std::lock_guard lk(m);
    free.emplace_back(cap, p);
  }
};

HostStaging::HostStaging(Device device) : device_(device), pool_(std::make_shared<Pool>(device)) {}

HostStaging::~HostStaging() {
  if (stream_.handle) stream_destroy(stream_);
}

size_t HostStaging::allocations() const {
  std::lock_guard lk(pool_->m);
  return pool_->allocated;
}

std::shared_ptr<StagedCopy> HostStaging::stage_in(StageRange read, StageRange write) {
  if (!read.bytes) read = {};
  if (!write.bytes) write = {};
  std::shared_ptr<StagedCopy> c(new StagedCopy());
  c->pool_ = pool_;
  c->read_ = read, c->write_ = write;
  const bool overlap = read.p && write.p && addr(read.p) < addr(write.p) + write.bytes &&
                       addr(write.p) < addr(read.p) + read.bytes;
  const uintptr_t lo = overlap ? std::min(addr(read.p), addr(write.p)) : 0;
  const size_t need = overlap ? std::max(addr(read.p) + read.bytes, addr(write.p) + write.bytes) - lo
                              : round_up(read.bytes) + write.bytes;
  if (need == 0) return c;
  auto [cap, block] = pool_->take(need);
  c->block_ = block, c->capacity_ = cap;
  if (overlap) {
    c->read_host_ = block + (addr(read.p) - lo);
    c->write_host_ = block + (addr(write.p) - lo);
  } else {
    c->read_host_ = read.p ? block : nullptr;
    c->write_host_ = write.p ? block + round_up(read.bytes) : nullptr;
  }
  if (read.p) copy(c->read_host_, Device::kCpu, read.p, device_, read.bytes);
  return c;
}

void HostStaging::stage_out(const StagedCopy& c) {
  if (c.write_.p) copy(const_cast<void*>(c.write_.p), device_, c.write_host_, Device::kCpu, c.write_.bytes);
}

void HostStaging::copy(void* dst, Device dd, const void* src, Device sd, size_t bytes) {
  if (device_ == Device::kCuda && !stream_.handle) stream_ = stream_create();
  copy_bytes(dst, dd, src, sd, bytes, stream_);
  if (device_ == Device::kCuda) stream_sync(stream_);
}

StagedCopy::~StagedCopy() {
  if (block_) pool_->give(capacity_, block_);
}

void* StagedCopy::host(const void* p) const {
  if (!p) return nullptr;
  if (inside(read_, p)) return read_host_ + (addr(p) - addr(read_.p));
  if (inside(write_, p)) return write_host_ + (addr(p) - addr(write_.p));
  MS_FAIL("comm staging: address {} is outside the staged ranges", p);
}

}  // namespace ms
