// shared_batches.cpp: see shared_batches.h.
// Segment layout: Header, then ring_slots slots of { uint64 seq; int inputs[dp*B*T]; int
// targets[dp*B*T] } (each rounded up to 64 bytes). Slot s holds micro-batch q when seq == q + 1.
// The producer publishes micro-batch q into slot q % ring_slots once every rank that reads tokens
// has read micro-batch q - ring_slots (its `consumed` count); a consumer waits for seq == q + 1.
// Waits sleep on three futex words of the header (attached / published / released), each bumped
// and woken by the side that changes it.
#include "data/shared_batches.h"

#include <fcntl.h>        // O_* constants
#include <linux/futex.h>  // FUTEX_WAIT, FUTEX_WAKE
#include <signal.h>       // sigaction, kill
#include <sys/mman.h>     // shm_open, mmap
#include <sys/stat.h>     // fstat
#include <sys/syscall.h>  // SYS_futex
#include <unistd.h>       // ftruncate, getpid, getuid, syscall
#include <xxhash.h>       // XXH64

#include <cerrno>
#include <algorithm>  // std::min
#include <chrono>
#include <climits>  // INT_MAX
#include <cstdio>   // std::snprintf
#include <cstring>
#include <fstream>  // /proc/<pid>/stat
#include <sstream>

#include <fmt/format.h>

#include "base/check.h"  // MS_CHECK, MS_FAIL
#include "base/clock.h"  // steady_ns

namespace ms {

namespace {
constexpr uint64_t kMagic = 0x4d53424154434832ull;  // "MSBATCH2"
constexpr uint32_t kVersion = 2;
constexpr int kMaxLocal = 256;
constexpr int64_t kPollNs = 20'000'000;  // longest futex sleep between liveness / deadline checks

// ---- signal-safe cleanup of the attach window --------------------------------------------------
// The name being set up; the handler unlinks it (shm_unlink is a plain unlink of /dev/shm/<name>)
// and re-raises the signal with the previous disposition.
// g_pending says whether g_pending_name is set (read by MachineBatchFeed::unlink_attaching from any
// thread or handler).
char g_pending_name[64] = {0};
std::atomic<bool> g_pending{false};
static_assert(std::atomic<bool>::is_always_lock_free);
struct sigaction g_old_term, g_old_int;

void unlink_pending_and_reraise(int sig) {
  if (g_pending.load(std::memory_order_acquire)) shm_unlink(g_pending_name);
  sigaction(sig, sig == SIGTERM ? &g_old_term : &g_old_int, nullptr);
  raise(sig);
}

void install_cleanup(const std::string& name) {
  std::snprintf(g_pending_name, sizeof g_pending_name, "%s", name.c_str());
  g_pending.store(true, std::memory_order_release);
  struct sigaction sa {};
  sa.sa_handler = unlink_pending_and_reraise;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
}

void remove_cleanup() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  g_pending.store(false, std::memory_order_release);
}

// ---- process identity ---------------------------------------------------------------------------
// Start time of process pid (clock ticks after boot, field 22 of /proc/<pid>/stat): with the pid it
// identifies a process even after pid reuse. 0 when the process is gone or a zombie.
uint64_t process_start(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!f || !std::getline(f, s)) return 0;
  const size_t close = s.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream rest(s.substr(close + 1));
  std::string field;
  uint64_t start = 0;
  for (int i = 3; i <= 22 && rest >> field; i++) {
    if (i == 3 && (field == "Z" || field == "X")) return 0;  // dead, not yet reaped
    if (i == 22) start = std::strtoull(field.c_str(), nullptr, 10);
  }
  return start;
}

// Whether the process (pid, start) still runs; without /proc (start 0) by kill(pid, 0) alone.
bool alive(int pid, uint64_t start) {
  if (pid <= 0) return false;
  if (start != 0) return process_start(pid) == start;
  return kill(pid, 0) == 0 || errno == EPERM;
}

// ---- futex words in the mapping ----------------------------------------------------------------
using Word = std::atomic_ref<uint32_t>;
static_assert(Word::is_always_lock_free);

uint32_t load(uint32_t& w) { return Word(w).load(std::memory_order_acquire); }

void wake(uint32_t& w) { syscall(SYS_futex, &w, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

void bump(uint32_t& w) {  // a change the other processes sleep on
  Word(w).fetch_add(1, std::memory_order_acq_rel);
  wake(w);
}

// Blocks until done(). Before each sleep runs check() (which may throw); sleeps until `w` changes
// from the value it had before done() was evaluated, or kPollNs passed.
template <class Done, class Check>
void await(uint32_t& w, Done done, Check check) {
  for (;;) {
    const uint32_t seen = load(w);
    if (done()) return;
    check();
    const timespec ts{0, kPollNs};
    syscall(SYS_futex, &w, FUTEX_WAIT, seen, &ts, nullptr, 0);  // shared (not PRIVATE): other processes
  }
}

int64_t deadline_after(double seconds) { return steady_ns() + static_cast<int64_t>(seconds * 1e9); }

uint64_t job_hash(const std::string& key) { return XXH64(key.data(), key.size(), 0); }
}  // namespace

struct MachineBatchFeed::Header {
  std::atomic<uint64_t> magic;  // written last by the producer (release)
  uint32_t version;
  int32_t producer_pid;         // local rank 0's process
  uint64_t job;                 // xxHash64 of the job key
  uint64_t producer_start;      // its start time (process_start), against pid reuse
  int32_t B, T, dp, ring_slots, local_world, pad;
  uint64_t num_samples;         // per epoch
  uint64_t start_epoch, start_index;
  alignas(64) uint32_t attached;  // futex: local ranks attached
  uint32_t published;             // futex: bumped per micro-batch (and on failure)
  uint32_t released;              // futex: bumped per micro-batch read (and on attach)
  std::atomic<int32_t> failed;    // the producer hit an error (message below)
  std::atomic<uint64_t> produced;      // micro-batches published (the sequence number)
  std::atomic<uint64_t> samples_read;  // by the producer, from the files
  char error[1024];
  std::atomic<uint64_t> consumed[kMaxLocal];  // per local rank: micro-batches read
  std::atomic<int32_t> needs[kMaxLocal];      // per local rank: reads tokens
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);

void MachineBatchFeed::unlink_attaching() noexcept {
  if (g_pending.load(std::memory_order_acquire)) shm_unlink(g_pending_name);
}

std::string MachineBatchFeed::segment_name(const std::string& job_key) {
  return fmt::format("/megascale-data-{}-{:016x}", getuid(), job_hash(job_key));
}

MachineBatchFeed::MachineBatchFeed(const MachineFeedOptions& opt) : opt_(opt) {
  MS_CHECK(opt.local_world_size >= 1 && opt.local_world_size <= kMaxLocal && opt.local_rank >= 0 &&
           opt.local_rank < opt.local_world_size, "{}: local rank {} of {} (at most {} per machine)", opt.name,
           opt.local_rank, opt.local_world_size, kMaxLocal);
  MS_CHECK(opt.ring_slots >= 1 && opt.dp >= 1 && opt.dp_rank >= 0 && opt.dp_rank < opt.dp && opt.B > 0 &&
           opt.T > 0 && opt.timeout_s > 0, "{}: bad feed options (ring_slots {}, dp rank {} of {}, B {}, T {}, "
           "timeout {} s)", opt.name, opt.ring_slots, opt.dp_rank, opt.dp, opt.B, opt.T, opt.timeout_s);
  segment_ = segment_name(opt.job_key);
  slot_ints_ = static_cast<size_t>(opt.dp) * opt.B * opt.T;
  const size_t slot_bytes = (sizeof(uint64_t) + 2 * slot_ints_ * sizeof(int) + 63) / 64 * 64;
  bytes_ = (sizeof(Header) + 63) / 64 * 64 + opt.ring_slots * slot_bytes;
  install_cleanup(segment_);
  try {
    if (opt.local_rank == 0) create_segment();
    attach_segment();
    wait_all_attached();  // the name is gone from here on (the last rank to attach removed it)
    unlinked_ = true;
    if (load_error_) std::rethrow_exception(load_error_);
  } catch (...) {
    stop_ = true;
    if (map_) bump(header()->released);
    if (producer_.joinable()) producer_.join();
    if (opt.local_rank == 0) shm_unlink(segment_.c_str());
    if (map_) munmap(map_, map_bytes_);
    map_ = nullptr;
    remove_cleanup();
    throw;
  }
  remove_cleanup();
}

MachineBatchFeed::~MachineBatchFeed() {
  stop_ = true;
  if (map_) bump(header()->released);  // wakes the producer
  if (producer_.joinable()) producer_.join();
  if (opt_.local_rank == 0 && !unlinked_) shm_unlink(segment_.c_str());
  if (map_) munmap(map_, map_bytes_);
}

MachineBatchFeed::Header* MachineBatchFeed::header() const { return static_cast<Header*>(map_); }

int* MachineBatchFeed::slot_inputs(uint64_t slot) const {
  const size_t slot_bytes = (sizeof(uint64_t) + 2 * slot_ints_ * sizeof(int) + 63) / 64 * 64;
  char* base = static_cast<char*>(map_) + (sizeof(Header) + 63) / 64 * 64 + slot * slot_bytes;
  return reinterpret_cast<int*>(base + sizeof(uint64_t));
}

bool MachineBatchFeed::producer_alive() const { return alive(header()->producer_pid, header()->producer_start); }

void MachineBatchFeed::fail_loader(const std::string& why) const {
  const Header* h = map_ ? header() : nullptr;
  MS_FAIL("{}: the machine's data loader (local rank 0, pid {}, shared memory {}): {}", opt_.name,
          h ? std::to_string(h->producer_pid) : std::string("unknown"), segment_, why);
}

void MachineBatchFeed::create_segment() {
  // A segment of this name is a leftover of an earlier run that crashed inside its attach window:
  // removed, never reused (consumers also refuse one whose producer is dead).
  shm_unlink(segment_.c_str());
  const int fd = shm_open(segment_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  MS_CHECK(fd >= 0, "{}: shm_open({}) failed: {}", opt_.name, segment_, std::strerror(errno));
  struct stat st {};
  if (ftruncate(fd, static_cast<off_t>(bytes_)) != 0 || fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    shm_unlink(segment_.c_str());
    MS_FAIL("{}: sizing shared memory {} to {} bytes failed: {}", opt_.name, segment_, bytes_, std::strerror(e));
  }
  inode_ = st.st_ino;
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  MS_CHECK(p != MAP_FAILED, "{}: mmap of {} failed: {}", opt_.name, segment_, std::strerror(errno));
  map_ = p;  // zero-filled by ftruncate
  map_bytes_ = bytes_;
  Header* h = header();
  // The machine's only loader: opens and validates every file (errors name file and reason). Its
  // batch is the whole data-parallel group's micro-batch, its position the shared stream's.
  try {
    loader_ = std::make_unique<DataLoader>(opt_.paths, opt_.B * opt_.dp, opt_.T, opt_.vocab_size, opt_.seed,
                                           opt_.shuffle, opt_.name, /*prefetch=*/false);
    if (opt_.start != DataLoader::Position{}) loader_->set_position(opt_.start);
    h->num_samples = loader_->num_samples();
  } catch (const std::exception& e) {  // published, so every local rank fails with the reason
    load_error_ = std::current_exception();
    loader_.reset();
    std::snprintf(h->error, sizeof h->error, "%s", e.what());
    h->failed.store(1, std::memory_order_release);
  }
  h->version = kVersion;
  h->job = job_hash(opt_.job_key);
  h->producer_pid = static_cast<int32_t>(getpid());
  h->producer_start = process_start(getpid());
  h->B = opt_.B, h->T = opt_.T, h->dp = opt_.dp, h->ring_slots = opt_.ring_slots;
  h->local_world = opt_.local_world_size;
  h->start_epoch = opt_.start.epoch, h->start_index = opt_.start.index;
  h->magic.store(kMagic, std::memory_order_release);
  if (loader_) producer_ = std::thread([this] { producer_loop(); });
}

void MachineBatchFeed::producer_loop() {
  Header* h = header();
  const size_t n = slot_ints_;
  const uint64_t ring = static_cast<uint64_t>(opt_.ring_slots);
  try {
    for (uint64_t seq = 0;; seq++) {
      // The slot is free once every local rank has attached and every one that reads tokens has
      // read micro-batch seq - ring_slots.
      auto slot_free = [&] {
        if (seq >= opt_.stall_after) return false;
        if (load(h->attached) <= static_cast<uint32_t>(opt_.local_world_size)) return false;  // not sealed
        for (int r = 0; r < opt_.local_world_size; r++)
          if (h->needs[r].load(std::memory_order_acquire) &&
              h->consumed[r].load(std::memory_order_acquire) + ring <= seq)
            return false;
        return true;
      };
      await(h->released, [&] { return stop_.load() || slot_free(); }, [] {});
      if (stop_) return;
      int* in = slot_inputs(seq % ring);
      loader_->next_batch(in, in + n);
      h->samples_read.store(loader_->dataset().samples_read(), std::memory_order_release);
      reinterpret_cast<std::atomic<uint64_t>*>(in)[-1].store(seq + 1, std::memory_order_release);
      h->produced.store(seq + 1, std::memory_order_release);
      bump(h->published);
    }
  } catch (const std::exception& e) {
    std::snprintf(h->error, sizeof h->error, "%s", e.what());
    h->failed.store(1, std::memory_order_release);
    bump(h->published);
  }
}

void MachineBatchFeed::attach_segment() {
  const int64_t deadline = deadline_after(opt_.timeout_s);
  std::string last = "no segment of that name";
  while (!map_) {  // other local ranks: open what local rank 0 created
    if (steady_ns() > deadline)
      fail_loader(fmt::format("not ready within {} s ({}; is local rank 0 running?)", opt_.timeout_s, last));
    const int fd = shm_open(segment_.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    struct stat st {};
    const size_t size = fstat(fd, &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
    void* p = size >= sizeof(Header) ? mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    const Header* h = static_cast<const Header*>(p);
    if (p == MAP_FAILED) {
      last = "segment being created";
    } else if (h->magic.load(std::memory_order_acquire) != kMagic) {
      last = "segment not initialised";
    } else if (h->version != kVersion || h->job != job_hash(opt_.job_key) ||
               !alive(h->producer_pid, h->producer_start)) {
      last = "stale segment (dead creator, other job or format)";  // wait for local rank 0's own
    } else {
      map_ = p;
      map_bytes_ = size;  // == bytes_ unless the shapes differ (refused below)
      inode_ = st.st_ino;
      break;
    }
    if (p != MAP_FAILED) munmap(p, size);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Header* h = header();
  const bool same = map_bytes_ == bytes_ && h->B == opt_.B && h->T == opt_.T && h->dp == opt_.dp &&
                    h->ring_slots == opt_.ring_slots && h->local_world == opt_.local_world_size &&
                    h->start_epoch == opt_.start.epoch && h->start_index == opt_.start.index;
  h->needs[opt_.local_rank].store(opt_.needs_tokens && same ? 1 : 0, std::memory_order_release);
  // Counted even when refused below, so nobody waits for this rank. The last rank to attach removes
  // the name before it lets the others go on (attached = local_world + 1): once any rank is past
  // its constructor, nothing of the job is left in /dev/shm whatever happens to its processes.
  if (Word(h->attached).fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(opt_.local_world_size)) {
    unlink_if_ours();
    Word(h->attached).fetch_add(1, std::memory_order_acq_rel);
  }
  wake(h->attached);
  bump(h->released);  // the producer waits for the last attach
  if (!same)
    fail_loader(fmt::format("it was set up for B {} T {} dp {} ring {} local ranks {} start {}:{}, this rank "
                            "asks for B {} T {} dp {} ring {} local ranks {} start {}:{}", h->B, h->T, h->dp,
                            h->ring_slots, h->local_world, h->start_epoch, h->start_index, opt_.B, opt_.T, opt_.dp,
                            opt_.ring_slots, opt_.local_world_size, opt_.start.epoch, opt_.start.index));
}

void MachineBatchFeed::wait_all_attached() {
  Header* h = header();
  const int64_t deadline = deadline_after(opt_.timeout_s);
  bool gave_up = false;  // local rank 0 with a loader error: stops waiting at the deadline, then throws it
  const uint32_t sealed = static_cast<uint32_t>(opt_.local_world_size) + 1;  // all attached, name removed
  await(h->attached, [&] { return gave_up || load(h->attached) >= sealed; }, [&] {
    if (opt_.local_rank != 0) {
      if (h->failed.load(std::memory_order_acquire)) fail_loader(std::string("it failed: ") + h->error);
      if (!producer_alive()) {
        unlink_if_ours();  // local rank 0 died inside the attach window
        fail_loader("its process is gone before every local rank attached");
      }
    }
    if (steady_ns() > deadline) {
      if (load_error_) gave_up = true;
      else fail_loader(fmt::format("only {} of {} local ranks attached within {} s",
                                   std::min<uint32_t>(load(h->attached), opt_.local_world_size),
                                   opt_.local_world_size, opt_.timeout_s));
    }
  });
  if (opt_.local_rank != 0 && h->failed.load(std::memory_order_acquire))
    fail_loader(std::string("it failed: ") + h->error);
}

void MachineBatchFeed::unlink_if_ours() const {
  const int fd = shm_open(segment_.c_str(), O_RDONLY, 0);
  if (fd < 0) return;
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_ino == inode_) shm_unlink(segment_.c_str());
  close(fd);
}

void MachineBatchFeed::next_batch(int* inputs, int* targets) {
  MS_CHECK(opt_.needs_tokens, "{}: next_batch on a rank that declared it needs no tokens", opt_.name);
  Header* h = header();
  const uint64_t seq = consumed_;
  int* in = slot_inputs(seq % static_cast<uint64_t>(opt_.ring_slots));
  auto& slot_seq = reinterpret_cast<std::atomic<uint64_t>*>(in)[-1];
  const int64_t deadline = deadline_after(opt_.timeout_s);
  await(h->published, [&] { return slot_seq.load(std::memory_order_acquire) == seq + 1; }, [&] {
    if (h->failed.load(std::memory_order_acquire)) fail_loader(std::string("it failed: ") + h->error);
    if (!producer_alive()) fail_loader(fmt::format("its process is gone (waiting for micro-batch {})", seq));
    if (steady_ns() > deadline)
      fail_loader(fmt::format("produced nothing for {} s (waiting for micro-batch {}); it stalled",
                              opt_.timeout_s, seq));
  });
  const size_t rows = static_cast<size_t>(opt_.B) * opt_.T, off = static_cast<size_t>(opt_.dp_rank) * rows;
  std::memcpy(inputs, in + off, rows * sizeof(int));
  std::memcpy(targets, in + slot_ints_ + off, rows * sizeof(int));
  consumed_++;
  h->consumed[opt_.local_rank].store(consumed_, std::memory_order_release);
  bump(h->released);
}

uint64_t MachineBatchFeed::num_samples() const { return header()->num_samples; }
uint64_t MachineBatchFeed::samples_read() const { return header()->samples_read.load(std::memory_order_acquire); }
uint64_t MachineBatchFeed::produced() const { return header()->produced.load(std::memory_order_acquire); }

DataLoader::Position MachineBatchFeed::position() const {
  // start + consumed x dp x B samples into the stream (128-bit: no overflow in any real run).
  const uint64_t n = num_samples();
  const unsigned __int128 total = static_cast<unsigned __int128>(opt_.start.index) +
                                  static_cast<unsigned __int128>(consumed_) * (slot_ints_ / opt_.T);
  DataLoader::Position p;
  p.epoch = opt_.start.epoch + static_cast<uint64_t>(total / n);
  p.index = static_cast<uint64_t>(total % n);
  return p;
}

int MachineBatchFeed::attached_ranks(const std::string& segment) {
  const int fd = shm_open(segment.c_str(), O_RDONLY, 0);
  if (fd < 0) return -1;
  struct stat st {};
  void* p = fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= sizeof(Header)
                ? mmap(nullptr, sizeof(Header), PROT_READ, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return 0;
  Header* h = static_cast<Header*>(p);
  const int n = h->magic.load(std::memory_order_acquire) == kMagic
                    ? std::min(static_cast<int>(load(h->attached)), h->local_world) : 0;
  munmap(p, sizeof(Header));
  return n;
}

}  // namespace ms
