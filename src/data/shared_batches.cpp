// shared_batches.cpp: see shared_batches.h.
#include "data/shared_batches.h"

#include <fcntl.h>     // O_* constants
#include <signal.h>    // sigaction, kill
#include <sys/mman.h>  // shm_open, mmap
#include <sys/stat.h>  // fstat
#include <unistd.h>    // ftruncate, getpid

#include <cerrno>
#include <chrono>
#include <cstdio>  // std::snprintf
#include <cstring>
#include <functional>  // std::hash

#include <fmt/format.h>

#include "base/check.h"        // MS_CHECK, MS_FAIL
#include "base/clock.h"        // steady_ns
#include "data/dataloader.h"   // DataLoader

namespace ms {

namespace {
constexpr uint64_t kMagic = 0x4d53424154434831ull;  // "MSBATCH1"
constexpr uint32_t kVersion = 1;
constexpr int kMaxLocal = 256;

// The name being set up, for the signal handler of the attach window (async-signal-safe unlink).
char g_pending_name[64] = {0};
struct sigaction g_old_term, g_old_int;

void unlink_pending_and_reraise(int sig) {
  if (g_pending_name[0]) shm_unlink(g_pending_name);
  sigaction(sig, sig == SIGTERM ? &g_old_term : &g_old_int, nullptr);
  raise(sig);
}

void install_cleanup(const std::string& name) {
  std::snprintf(g_pending_name, sizeof g_pending_name, "%s", name.c_str());
  struct sigaction sa {};
  sa.sa_handler = unlink_pending_and_reraise;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

void remove_cleanup() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  g_pending_name[0] = 0;
}

bool alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }
void nap() { std::this_thread::sleep_for(std::chrono::microseconds(200)); }
}  // namespace

struct MachineBatchFeed::Header {
  std::atomic<uint64_t> magic;   // written last by the producer (release)
  uint32_t version;
  uint64_t job_hash;
  int32_t producer_pid;
  int32_t B, T, dp, ring_slots, local_world;
  uint64_t num_samples;
  std::atomic<int32_t> attached;
  std::atomic<uint64_t> produced;      // micro-batches published
  std::atomic<uint64_t> samples_read;  // by the producer, from the files
  std::atomic<int32_t> failed;         // the producer hit an error (message below)
  char error[512];
  std::atomic<uint64_t> consumed[kMaxLocal];  // per local rank: micro-batches read
  std::atomic<int32_t> needs[kMaxLocal];      // per local rank: reads tokens
  // then ring_slots x { std::atomic<uint64_t> seq; int inputs[dp*B*T]; int targets[dp*B*T]; }
};

MachineBatchFeed::MachineBatchFeed(const MachineFeedOptions& opt) : opt_(opt) {
  MS_CHECK(opt.local_world_size >= 1 && opt.local_world_size <= kMaxLocal && opt.local_rank >= 0 &&
           opt.local_rank < opt.local_world_size, "{}: local rank {} of {} (at most {} per machine)", opt.name,
           opt.local_rank, opt.local_world_size, kMaxLocal);
  MS_CHECK(opt.ring_slots >= 1 && opt.dp >= 1 && opt.dp_rank >= 0 && opt.dp_rank < opt.dp && opt.timeout_s > 0,
           "{}: bad feed options (ring_slots {}, dp rank {} of {}, timeout {} s)", opt.name, opt.ring_slots,
           opt.dp_rank, opt.dp, opt.timeout_s);
  segment_ = fmt::format("/megascale-{:016x}", std::hash<std::string>{}(opt.job_key));
  slot_ints_ = static_cast<size_t>(opt.dp) * opt.B * opt.T;
  const size_t slot_bytes = sizeof(uint64_t) + 2 * slot_ints_ * sizeof(int);
  bytes_ = sizeof(Header) + opt.ring_slots * ((slot_bytes + 63) / 64 * 64);
  install_cleanup(segment_);
  try {
    if (opt.local_rank == 0) create_segment();
    attach_segment();
    // Wait until every local rank has attached, then remove the name: nothing outlives the job.
    const int64_t deadline = steady_ns() + static_cast<int64_t>(opt.timeout_s * 1e9);
    while (header()->attached.load(std::memory_order_acquire) < opt.local_world_size) {
      if (header()->failed.load()) fail_loader(std::string("the producer failed: ") + header()->error);
      if (steady_ns() > deadline)
        fail_loader(fmt::format("only {} of {} local ranks attached within {} s",
                                header()->attached.load(), opt.local_world_size, opt.timeout_s));
      nap();
    }
    if (opt.local_rank == 0) shm_unlink(segment_.c_str());
    unlinked_ = true;
  } catch (...) {
    stop_ = true;
    if (producer_.joinable()) producer_.join();
    if (opt.local_rank == 0) shm_unlink(segment_.c_str());
    if (map_) munmap(map_, bytes_);
    remove_cleanup();
    throw;
  }
  remove_cleanup();
}

MachineBatchFeed::~MachineBatchFeed() {
  stop_ = true;
  if (producer_.joinable()) producer_.join();
  if (opt_.local_rank == 0 && !unlinked_) shm_unlink(segment_.c_str());
  if (map_) munmap(map_, bytes_);
}

MachineBatchFeed::Header* MachineBatchFeed::header() const { return static_cast<Header*>(map_); }

int* MachineBatchFeed::slot_inputs(uint64_t slot) const {
  const size_t slot_bytes = (sizeof(uint64_t) + 2 * slot_ints_ * sizeof(int) + 63) / 64 * 64;
  char* base = static_cast<char*>(map_) + sizeof(Header) + slot * slot_bytes;
  return reinterpret_cast<int*>(base + sizeof(uint64_t));
}

void MachineBatchFeed::fail_loader(const std::string& why) const {
  const Header* h = map_ ? header() : nullptr;
  MS_FAIL("{}: the machine's data loader (local rank 0, pid {}, shared memory {}): {}", opt_.name,
          h ? h->producer_pid : -1, segment_, why);
}

void MachineBatchFeed::create_segment() {
  // A segment of this name is a leftover of an earlier run that crashed before unlinking it:
  // removed, never reused (consumers also refuse one whose producer is dead).
  shm_unlink(segment_.c_str());
  const int fd = shm_open(segment_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  MS_CHECK(fd >= 0, "{}: shm_open({}) failed: {}", opt_.name, segment_, std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
    const int e = errno;
    close(fd);
    shm_unlink(segment_.c_str());
    MS_FAIL("{}: ftruncate of shared memory {} to {} bytes failed: {}", opt_.name, segment_, bytes_, std::strerror(e));
  }
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  MS_CHECK(p != MAP_FAILED, "{}: mmap of {} failed: {}", opt_.name, segment_, std::strerror(errno));
  map_ = p;  // zero-filled by ftruncate
  // The machine's only loader: opens and validates every file (errors name file and reason).
  auto loader = std::make_shared<DataLoader>(opt_.paths, opt_.B * opt_.dp, opt_.T, opt_.vocab_size, opt_.seed,
                                             opt_.shuffle, opt_.name, /*prefetch=*/false);
  Header* h = header();
  h->version = kVersion;
  h->job_hash = std::hash<std::string>{}(opt_.job_key);
  h->producer_pid = static_cast<int32_t>(getpid());
  h->B = opt_.B, h->T = opt_.T, h->dp = opt_.dp, h->ring_slots = opt_.ring_slots;
  h->local_world = opt_.local_world_size;
  h->num_samples = loader->num_samples();
  h->magic.store(kMagic, std::memory_order_release);
  producer_ = std::thread([this, loader] {
    try {
      DataLoader& l = *loader;
      Header* hh = header();
      const size_t n = slot_ints_;
      for (uint64_t seq = 0;; seq++) {
        const uint64_t slot = seq % opt_.ring_slots;
        // The slot is free once every rank that reads tokens has read micro-batch seq - ring_slots.
        for (;;) {
          if (stop_) return;
          bool free = hh->attached.load(std::memory_order_acquire) >= opt_.local_world_size;
          for (int r = 0; free && r < opt_.local_world_size; r++)
            if (hh->needs[r].load(std::memory_order_acquire) &&
                hh->consumed[r].load(std::memory_order_acquire) + opt_.ring_slots <= seq)
              free = false;
          if (free && seq < opt_.stall_after) break;
          nap();
        }
        int* in = slot_inputs(slot);
        l.next_batch(in, in + n);
        hh->samples_read.store(l.dataset().samples_read(), std::memory_order_relaxed);
        reinterpret_cast<std::atomic<uint64_t>*>(in)[-1].store(seq + 1, std::memory_order_release);
        hh->produced.store(seq + 1, std::memory_order_release);
      }
    } catch (const std::exception& e) {
      std::snprintf(header()->error, sizeof header()->error, "%s", e.what());
      header()->failed.store(1, std::memory_order_release);
    }
  });
}

void MachineBatchFeed::attach_segment() {
  const uint64_t job = std::hash<std::string>{}(opt_.job_key);
  const int64_t deadline = steady_ns() + static_cast<int64_t>(opt_.timeout_s * 1e9);
  std::string last = "no segment yet";
  for (;; nap()) {
    if (steady_ns() > deadline) fail_loader(fmt::format("not ready within {} s ({})", opt_.timeout_s, last));
    if (!map_) {  // other local ranks: open what local rank 0 created
      const int fd = shm_open(segment_.c_str(), O_RDWR, 0600);
      if (fd < 0) continue;
      void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      struct stat st {};
      const bool sized = fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes_;
      close(fd);
      if (p == MAP_FAILED) continue;
      if (!sized) { munmap(p, bytes_); last = "segment of another size"; continue; }
      Header* h = static_cast<Header*>(p);
      if (h->magic.load(std::memory_order_acquire) != kMagic) { munmap(p, bytes_); last = "segment not initialised"; continue; }
      if (h->version != kVersion || h->job_hash != job || !alive(h->producer_pid)) {
        munmap(p, bytes_);  // stale (an earlier crash) or foreign: wait for local rank 0's own
        last = "stale segment (dead producer, other job or format)";
        continue;
      }
      map_ = p;
    }
    break;
  }
  Header* h = header();
  MS_CHECK(h->B == opt_.B && h->T == opt_.T && h->dp == opt_.dp && h->ring_slots == opt_.ring_slots &&
           h->local_world == opt_.local_world_size, "{}: shared memory {} was made for another shape", opt_.name, segment_);
  h->needs[opt_.local_rank].store(opt_.needs_tokens ? 1 : 0, std::memory_order_release);
  h->attached.fetch_add(1, std::memory_order_acq_rel);
}

void MachineBatchFeed::next_batch(int* inputs, int* targets) {
  MS_CHECK(opt_.needs_tokens, "{}: next_batch on a rank that declared it needs no tokens", opt_.name);
  Header* h = header();
  const uint64_t seq = consumed_;
  int* in = slot_inputs(seq % opt_.ring_slots);
  auto& slot_seq = reinterpret_cast<std::atomic<uint64_t>*>(in)[-1];
  const int64_t since = steady_ns();
  while (slot_seq.load(std::memory_order_acquire) != seq + 1) {
    if (h->failed.load(std::memory_order_acquire)) fail_loader(std::string("failed: ") + h->error);
    if (!alive(h->producer_pid)) fail_loader(fmt::format("its process is gone (micro-batch {})", seq));
    if (steady_ns() - since > static_cast<int64_t>(opt_.timeout_s * 1e9))
      fail_loader(fmt::format("produced nothing for {} s (waiting for micro-batch {}); it stalled", opt_.timeout_s, seq));
    nap();
  }
  const size_t rows = static_cast<size_t>(opt_.B) * opt_.T, off = static_cast<size_t>(opt_.dp_rank) * rows;
  std::memcpy(inputs, in + off, rows * sizeof(int));
  std::memcpy(targets, in + slot_ints_ + off, rows * sizeof(int));
  consumed_++;
  h->consumed[opt_.local_rank].store(consumed_, std::memory_order_release);
}

uint64_t MachineBatchFeed::num_samples() const { return header()->num_samples; }
uint64_t MachineBatchFeed::samples_read() const { return header()->samples_read.load(std::memory_order_acquire); }

}  // namespace ms
