// memory_snapshot.cpp: see memory_snapshot.h.
#include "ckpt/memory_snapshot.h"

#include <fcntl.h>     // open
#include <sys/mman.h>  // mmap
#include <sys/stat.h>  // fstat
#include <unistd.h>    // ftruncate, close

#include <atomic>   // std::atomic_thread_fence
#include <cerrno>
#include <chrono>
#include <cstring>  // std::memcpy, std::memset

#include <fmt/format.h>
#include <xxhash.h>

#include "base/check.h"  // MS_CHECK, MS_SYSCHECK

namespace ms {

namespace {
constexpr char kMagic[8] = {'M', 'S', 'M', 'E', 'M', 'S', 'N', '1'};

uint8_t* map_fd(int fd, size_t size, const std::string& path) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  MS_SYSCHECK(p != MAP_FAILED, "mmap {} ({} bytes)", path, size);
  return static_cast<uint8_t*>(p);
}
}  // namespace

SnapshotFile SnapshotFile::create(const std::string& path, size_t payload_bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  MS_SYSCHECK(fd >= 0, "open {}", path);
  SnapshotFile f;
  f.path_ = path;
  f.size_ = kSnapshotHeaderBytes + payload_bytes;
  struct stat st{};
  const bool keep = ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == f.size_;
  if (keep) {  // the same snapshot file of an earlier process of this rank: its contents stay
    f.sparse_ = static_cast<size_t>(st.st_blocks) * 512 < f.size_;
    f.base_ = map_fd(fd, f.size_, path);
    ::close(fd);
    return f;
  }
  const bool sized = ::ftruncate(fd, 0) == 0 && ::ftruncate(fd, static_cast<off_t>(f.size_)) == 0;
  const int err = errno;
  if (!sized) ::close(fd);
  errno = err;
  MS_SYSCHECK(sized, "ftruncate {} to {} bytes (is the memory folder full?)", path, f.size_);
  f.base_ = map_fd(fd, f.size_, path);
  ::close(fd);
  f.sparse_ = true;
  f.begin_write();
  return f;
}

std::optional<SnapshotFile> SnapshotFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return std::nullopt;
  MS_SYSCHECK(fd >= 0, "open {}", path);
  struct stat st{};
  const bool ok = ::fstat(fd, &st) == 0;
  if (!ok) ::close(fd);
  MS_SYSCHECK(ok, "fstat {}", path);
  SnapshotFile f;
  f.path_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ >= kSnapshotHeaderBytes) f.base_ = map_fd(fd, f.size_, path);
  ::close(fd);
  if (!f.base_) f.size_ = 0;  // too small to be a snapshot: check_snapshot says so
  return f;
}

SnapshotFile::SnapshotFile(SnapshotFile&& o) noexcept { *this = std::move(o); }
SnapshotFile& SnapshotFile::operator=(SnapshotFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    base_ = o.base_, size_ = o.size_, sparse_ = o.sparse_;
    o.base_ = nullptr, o.size_ = 0;
  }
  return *this;
}
SnapshotFile::~SnapshotFile() { release(); }
void SnapshotFile::release() {
  if (base_) ::munmap(base_, size_);
  base_ = nullptr, size_ = 0;
}

void SnapshotFile::prefault() {
  if (!base_ || !sparse_) return;
  if (::madvise(base_, size_, MADV_POPULATE_WRITE) == 0) return;
  // Kernels before 5.14: touch each page (a write of the byte already there: contents kept).
  const long page = ::sysconf(_SC_PAGESIZE);
  for (size_t at = 0; at < size_; at += static_cast<size_t>(page)) {
    volatile uint8_t* b = base_ + at;
    *b = *b;
  }
}

void SnapshotFile::begin_write() {
  SnapshotHeader& h = header();
  h.state = 0;
  std::atomic_thread_fence(std::memory_order_release);
}

void SnapshotFile::complete(SnapshotHeader h, const uint64_t* known_hash) {
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = 1;
  h.state = 0;
  h.payload_xxh64 = known_hash ? *known_hash : XXH64(payload(), h.payload_bytes, 0);
  h.written_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::memcpy(base_, &h, sizeof h);
  std::atomic_thread_fence(std::memory_order_release);
  header().state = 1;  // last: the snapshot is complete
}

std::string check_snapshot(const SnapshotFile& f, uint64_t layout, bool verify_hash) {
  if (f.file_bytes() < kSnapshotHeaderBytes) return fmt::format("{}: too short to be a snapshot", f.path());
  const SnapshotHeader& h = f.header();
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != 1)
    return fmt::format("{}: not a version-1 megascale snapshot", f.path());
  if (h.state != 1) return fmt::format("{}: incomplete (its writer stopped midway)", f.path());
  if (h.layout != layout)
    return fmt::format("{}: another job's or layout's snapshot (layout {:016x}, this run's {:016x})", f.path(),
                       h.layout, layout);
  if (h.payload_bytes > f.payload_capacity())
    return fmt::format("{}: says {} payload bytes, the file holds {}", f.path(), h.payload_bytes, f.payload_capacity());
  if (verify_hash && XXH64(f.payload(), h.payload_bytes, 0) != h.payload_xxh64)
    return fmt::format("{}: the payload's XXH64 is not the one recorded (corrupted)", f.path());
  return "";
}

std::string own_snapshot_name(int rank, int slot) { return fmt::format("own-r{:05d}-s{}.snap", rank, slot); }
std::string replica_snapshot_name(int holder, int owner, int slot) {
  return fmt::format("rep-h{:05d}-o{:05d}-s{}.snap", holder, owner, slot);
}

}  // namespace ms
