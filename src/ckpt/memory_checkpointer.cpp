// memory_checkpointer.cpp: see memory_checkpointer.h.
#include "ckpt/memory_checkpointer.h"

#include <sys/resource.h>  // setpriority
#include <sys/syscall.h>   // SYS_gettid
#include <unistd.h>

#include <algorithm>   // std::sort, std::max
#include <array>
#include <cmath>       // std::ceil
#include <cstdlib>     // std::getenv
#include <cstring>     // std::memcpy
#include <ctime>       // clock_gettime
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <xxhash.h>

#include "base/check.h"       // MS_CHECK
#include "base/clock.h"       // Stopwatch
#include "base/log.h"         // logger
#include "base/thread_pin.h"  // restore_thread_affinity
#include "ckpt/ckpt_fault.h"  // ckpt_fault_point
#include "ckpt/manifest.h"    // model_config_hash
#include "comm/communicator.h"
#include "obs/run_recorder.h" // TraceScope

namespace ms {
namespace fs = std::filesystem;

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Lowest-but-one CPU priority for the calling thread (the hash and the replication run behind training).
void lower_thread_priority() {
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 10);
}

// Message tags on the memory group: a save's headers and payloads, by the save's step parity.
uint32_t header_tag(int step) { return 0x4d450000u + static_cast<uint32_t>(step % 2) * 2; }
uint32_t payload_tag(int step) { return header_tag(step) + 1; }

}  // namespace

std::vector<int> replica_destinations(const std::vector<int>& host_of, int rank, int replicas) {
  std::vector<int> hosts;  // in order of their lowest rank
  std::map<int, std::vector<int>> ranks_of;
  for (int r = 0; r < static_cast<int>(host_of.size()); r++) {
    if (!ranks_of.count(host_of[r])) hosts.push_back(host_of[r]);
    ranks_of[host_of[r]].push_back(r);
  }
  const int n = static_cast<int>(hosts.size());
  const int mine = static_cast<int>(std::find(hosts.begin(), hosts.end(), host_of[rank]) - hosts.begin());
  const std::vector<int>& own = ranks_of[host_of[rank]];
  const int pos = static_cast<int>(std::find(own.begin(), own.end(), rank) - own.begin());
  std::vector<int> out;
  for (int k = 1; k <= std::min(replicas, n - 1); k++) {
    const std::vector<int>& there = ranks_of[hosts[(mine + k) % n]];
    out.push_back(there[pos % there.size()]);
  }
  return out;
}

std::string memory_dir_of(const Config& cfg) {
  if (!cfg.checkpoint.memory_dir.empty()) return cfg.checkpoint.memory_dir;
  const char* env = std::getenv("MEGASCALE_MEM_DIR");
  return env ? env : "";
}

uint64_t memory_layout_hash(const Config& cfg, int rank, int world, const std::vector<StateRun>& runs) {
  std::string text = fmt::format("{}|{}|r{}/{}|dp{} tp{} pp{} v{}", fs::absolute(cfg.train.out_dir).string(),
                                 model_config_hash(cfg.model), rank, world, cfg.parallel.dp, cfg.parallel.tp,
                                 cfg.parallel.pp, cfg.parallel.virtual_stages);
  for (const StateRun& r : runs) text += fmt::format("|{}:{}:{}-{}", r.chunk, r.spec->name, r.lo, r.hi);
  return XXH64(text.data(), text.size(), 0);
}

MemoryCheckpointer::MemoryCheckpointer(const Config& cfg, ParallelModel& model, Communicator* group,
                                       CheckpointRank who, std::string dir, int host_index)
    : cfg_(cfg), model_(model), group_(group), who_(who), dir_(std::move(dir)) {
  MS_CHECK(!dir_.empty(), "in-memory checkpoints need checkpoint.memory_dir (or $MEGASCALE_MEM_DIR)");
  MS_CHECK(cfg.train.device == Device::kCpu, "in-memory checkpoints: train.device='{}' (state in GPU memory) is not "
           "built yet; set checkpoint.memory_every=0", config_name(cfg.train.device));
  fs::create_directories(dir_);
  runs_ = model_.own_state_runs();
  for (const StateRun& r : runs_) payload_bytes_ += 3 * (r.hi - r.lo) * sizeof(float);
  layout_ = memory_layout_hash(cfg, who.rank, who.world, runs_);
  // Every rank's host and payload size (fixed for the run): the placement and the receive sizes.
  // Raw 64-bit values through the float all-gather (it moves bits, no arithmetic).
  struct Entry {
    int64_t host;
    uint64_t bytes;
  };
  static_assert(sizeof(Entry) % sizeof(float) == 0);
  const int world = group_ ? group_->size() : 1;
  const Entry mine{host_index, payload_bytes_};
  std::vector<Entry> all(static_cast<size_t>(world), mine);
  if (group_) group_->all_gather(&mine, all.data(), sizeof(Entry) / sizeof(float), DType::kF32);
  for (const Entry& e : all) {
    host_of_.push_back(static_cast<int>(e.host));
    bytes_of_.push_back(e.bytes);
  }
  dests_ = replica_destinations(host_of_, who.rank, cfg.checkpoint.memory_replicas);
  for (int r = 0; r < world; r++)
    for (int d : replica_destinations(host_of_, r, cfg.checkpoint.memory_replicas))
      if (d == who.rank) sources_.push_back(r);
  // A restarted rank's own slots keep what they hold: the newest complete copy (likely the one it
  // restored from) is pinned until the first round finishes everywhere.
  auto complete_step = [](const SnapshotFile& f) { return f.header().state == 1 ? f.header().step : -1; };
  for (int s = 0; s < kOwnSnapshotSlots; s++) {
    own_[s] = SnapshotFile::create(dir_ + "/" + own_snapshot_name(who.rank, s), payload_bytes_);
    slot_step_[s] = complete_step(own_[s]);
    if (slot_step_[s] >= 0 && (pin_done_ < 0 || slot_step_[s] > slot_step_[pin_done_])) pin_done_ = s;
  }
  held_.resize(sources_.size());
  held_next_.assign(sources_.size(), 0);
  for (size_t i = 0; i < sources_.size(); i++) {
    for (int s = 0; s < 2; s++)
      held_[i][s] = SnapshotFile::create(dir_ + "/" + replica_snapshot_name(who.rank, sources_[i], s),
                                         bytes_of_[sources_[i]]);
    held_next_[i] = complete_step(held_[i][0]) > complete_step(held_[i][1]) ? 1 : 0;  // not the newest
  }
  interval_ = cfg.checkpoint.memory_every > 0 ? cfg.checkpoint.memory_every : 1;
  worker_ = std::thread([this] { worker_main(false); });
  local_worker_ = std::thread([this] { worker_main(true); });
}

MemoryCheckpointer::~MemoryCheckpointer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (local_worker_.joinable()) local_worker_.join();
}

bool MemoryCheckpointer::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !jobs_.empty();  // a job leaves its queue when its worker is done with it
}

MemoryCheckpointer::Job MemoryCheckpointer::make_job(int step, DataLoader::Position data, uint64_t tokens, float loss,
                                                     bool replicate) {
  Job j;
  j.step = step, j.replicate = replicate;
  SnapshotHeader& h = j.header;
  h.rank = who_.rank, h.world = who_.world, h.step = step, h.layout = layout_;
  h.data_epoch = data.epoch, h.data_index = data.index, h.tokens = tokens, h.loss = loss;
  h.payload_bytes = payload_bytes_;
  return j;
}

int MemoryCheckpointer::pick_slot() const {
  int best = -1;
  for (int s = 0; s < kOwnSnapshotSlots; s++)
    if (s != pin_round_ && s != pin_done_ && !slot_busy_[s] && (best < 0 || slot_step_[s] < slot_step_[best]))
      best = s;
  return best;
}

MemorySaveStats MemoryCheckpointer::enqueue(int step, DataLoader::Position data, uint64_t tokens, float loss,
                                            bool replicate) {
  TraceScope span(replicate ? "memory-snapshot" : "memory-snapshot-local");
  const Stopwatch w;
  Job j = make_job(step, data, tokens, loss, replicate);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!replicate && (!local_jobs_.empty() || copy_slot_ >= 0)) return {};
    j.slot = pick_slot();  // a round: pinned at most the last round's slot, busy at most one local one's
    MS_CHECK(j.slot >= 0 || !replicate, "in-memory checkpoint: no own slot free at step {}", step);
    if (j.slot < 0) return {};
    slot_busy_[j.slot] = true, slot_step_[j.slot] = step, copy_slot_ = j.slot;
    if (replicate) pin_round_ = j.slot;
    (replicate ? jobs_ : local_jobs_).push_back(j);
  }
  cv_.notify_all();
  return MemorySaveStats{true, w.seconds(), payload_bytes_};
}

MemorySaveStats MemoryCheckpointer::save(int step, DataLoader::Position data, uint64_t tokens, float loss) {
  return enqueue(step, data, tokens, loss, true);
}

MemorySaveStats MemoryCheckpointer::save_local(int step, DataLoader::Position data, uint64_t tokens, float loss) {
  return enqueue(step, data, tokens, loss, false);
}

void MemoryCheckpointer::round_finished_everywhere() {
  std::lock_guard<std::mutex> lock(mu_);
  if (pin_round_ >= 0 && round_ok_) pin_done_ = pin_round_;
  pin_round_ = -1;
}

double MemoryCheckpointer::finish_stage1() {
  const Stopwatch w;
  std::unique_lock<std::mutex> lock(mu_);
  if (copy_slot_ < 0) return 0;
  cv_.wait(lock, [&] { return copy_slot_ < 0; });
  return w.seconds();
}

std::vector<MemoryOutcome> MemoryCheckpointer::take_outcomes() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(outcomes_, {});
}

void MemoryCheckpointer::agree_interval(double step_seconds) {
  if (cfg_.checkpoint.memory_every > 0) return;  // fixed
  // The interval at which this rank's last save costs <= 5% of the steps it spans.
  float want = 1;
  if (step_seconds > 0) want = static_cast<float>(std::max(1.0, std::ceil(last_cost_s_ / (0.05 * step_seconds))));
  if (group_) group_->all_reduce(&want, 1, DType::kF32, ReduceOp::kMax);
  interval_ = static_cast<int>(want);
}

void MemoryCheckpointer::worker_main(bool local) {
  restore_thread_affinity();  // not the training thread's CPU
  std::deque<Job>& queue = local ? local_jobs_ : jobs_;
  // The slots' pages first, while the first steps run: a first save into a fresh slot would pay
  // for them inside its copy, which the next update waits for.
  if (!local) {
    for (SnapshotFile& f : own_) f.prefault();
    for (auto& slots : held_)
      for (SnapshotFile& f : slots) f.prefault();
  }
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue.empty() || stop_; });
      if (queue.empty()) return;
      job = queue.front();
    }
    MemoryOutcome out;
    try {
      out = run_job(job);
    } catch (const std::exception& e) {
      out.step = job.step, out.local = !job.replicate, out.message = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue.pop_front();
      if (copy_slot_ == job.slot) copy_slot_ = -1;  // it failed during its copy
      slot_busy_[job.slot] = false;
      if (!out.ok) slot_step_[job.slot] = -1;  // whatever it holds is not that step
      if (!local) last_cost_s_ = out.worker_cpu_seconds, round_ok_ = out.ok;
      outcomes_.push_back(std::move(out));
    }
    cv_.notify_all();
  }
}

MemoryOutcome MemoryCheckpointer::run_job(const Job& job) {
  MemoryOutcome out;
  out.step = job.step, out.bytes = payload_bytes_, out.local = !job.replicate;
  const double cpu0 = thread_cpu_seconds();
  SnapshotFile& f = own_[job.slot];
  Stopwatch w;
  {
    TraceScope span("memory-snapshot-copy");
    f.begin_write();  // incomplete until complete(): a crash midway leaves no complete-looking copy
    ckpt_fault_point("mem_copy", who_.rank, job.step);
    uint8_t* p = f.payload();
    for (const StateRun& r : runs_) {
      const size_t n = (r.hi - r.lo) * sizeof(float);
      std::memcpy(p, r.param, n), p += n;
      std::memcpy(p, r.m, n), p += n;
      std::memcpy(p, r.v, n), p += n;
    }
  }
  out.copy_seconds = w.seconds();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (copy_slot_ == job.slot) copy_slot_ = -1;  // the state may change now (the update)
  }
  cv_.notify_all();
  lower_thread_priority();
  w.restart();
  f.complete(job.header);
  out.hash_seconds = w.seconds();
  w.restart();
  if (job.replicate) replicate(job, out);
  out.replicate_seconds = w.seconds();
  out.worker_cpu_seconds = thread_cpu_seconds() - cpu0;
  out.ok = true;
  out.message = job.replicate ? fmt::format("step {}: {:.1f} MiB in memory ({} own), {} replica(s) sent, {} held",
                                            job.step, payload_bytes_ / 1048576.0, f.path(), dests_.size(),
                                            sources_.size())
                              : fmt::format("step {}: {:.1f} MiB in memory ({} own, local: a round is in flight)",
                                            job.step, payload_bytes_ / 1048576.0, f.path());
  return out;
}

// Headers first (every replica's size and hash travel with it), then the payloads, straight into
// the holders' snapshot files; a holder checks the payload's XXH64 before it marks its copy complete.
void MemoryCheckpointer::replicate(const Job& job, MemoryOutcome& out) {
  if (!group_ || (dests_.empty() && sources_.empty())) return;
  TraceScope span("memory-snapshot-replicate");
  const SnapshotFile& own = own_[job.slot];
  std::vector<SnapshotHeader> in(sources_.size());
  std::vector<CommWork> works;
  for (size_t i = 0; i < sources_.size(); i++)
    works.push_back(group_->start_recv(&in[i], sizeof(SnapshotHeader), sources_[i], header_tag(job.step)));
  for (int d : dests_) works.push_back(group_->start_send(&own.header(), sizeof(SnapshotHeader), d, header_tag(job.step)));
  for (CommWork& c : works) c.wait();
  works.clear();
  ckpt_fault_point("mem_send", who_.rank, job.step);
  ckpt_fault_point("slow_send", who_.rank, job.step);
  std::vector<SnapshotFile*> targets;
  for (size_t i = 0; i < sources_.size(); i++) {
    MS_CHECK(in[i].step == job.step && in[i].rank == sources_[i] && in[i].payload_bytes == bytes_of_[sources_[i]],
             "in-memory checkpoint: rank {}'s replica header says step {} rank {} {} bytes, expected step {} rank {} "
             "{} bytes", sources_[i], in[i].step, in[i].rank, in[i].payload_bytes, job.step, sources_[i],
             bytes_of_[sources_[i]]);
    SnapshotFile& t = held_[i][held_next_[i]];
    held_next_[i] ^= 1;
    t.begin_write();
    targets.push_back(&t);
    works.push_back(group_->start_recv(t.payload(), in[i].payload_bytes, sources_[i], payload_tag(job.step)));
  }
  for (int d : dests_) works.push_back(group_->start_send(own.payload(), payload_bytes_, d, payload_tag(job.step)));
  for (CommWork& c : works) c.wait();
  for (size_t i = 0; i < sources_.size(); i++) {
    SnapshotFile& t = *targets[i];
    const uint64_t got = XXH64(t.payload(), in[i].payload_bytes, 0);  // what arrived, before it counts
    MS_CHECK(got == in[i].payload_xxh64, "in-memory checkpoint: rank {}'s replica of step {} arrived corrupted "
             "(XXH64 {:016x}, sent {:016x}); it stays incomplete", sources_[i], job.step, got, in[i].payload_xxh64);
    t.complete(in[i], &got);
    if (ckpt_fault_point("mem_flip", who_.rank, job.step)) t.payload()[t.header().payload_bytes / 2] ^= 0x40;
    out.replica_bytes += in[i].payload_bytes;
  }
}

}  // namespace ms
