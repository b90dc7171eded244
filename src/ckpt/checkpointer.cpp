// checkpointer.cpp: see checkpointer.h.
#include "ckpt/checkpointer.h"

#include <sys/resource.h>  // setpriority
#include <sys/syscall.h>   // SYS_gettid, SYS_ioprio_set
#include <unistd.h>        // syscall, getpid

#include <algorithm>  // std::sort
#include <chrono>
#include <cmath>      // std::isfinite
#include <random>

#include <fmt/format.h>

#include "base/check.h"          // MS_CHECK
#include "base/clock.h"          // Stopwatch
#include "base/device.h"         // copy_bytes, pin_host_memory, events
#include "kernels/backend.h"     // KernelBackend::stream
#include "base/log.h"            // logger
#include "base/safetensors.h"    // safetensors_parts, StView
#include "base/thread_pin.h"     // restore_thread_affinity
#include "ckpt/ckpt_comm.h"      // broadcast_text
#include "ckpt/ckpt_fault.h"     // ckpt_fault_point
#include "ckpt/data_stream.h"    // data_stream_of
#include "comm/communicator.h"   // Communicator
#include "model/param_layout.h"  // build_param_layout, ParamSplit
#include "obs/trace_sink.h"      // TraceScope
#include "parallel/parallel_model.h"  // ParallelModel, StateRun

namespace ms {

std::string checkpoint_dir_name(int step) { return fmt::format("step-{:08d}", step); }

int checkpoint_step_of(const std::string& name) {
  if (name.size() != 13 || !name.starts_with("step-")) return -1;
  for (size_t i = 5; i < name.size(); i++)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stoi(name.substr(5));
}

namespace {
const char* split_name(ParamSplit s) {
  switch (s) {
    case ParamSplit::kReplicated: return "replicated";
    case ParamSplit::kRows: return "rows";
    case ParamSplit::kCols: return "cols";
    case ParamSplit::kQkvRows: return "qkv_rows";
  }
  return "?";
}

// True if no element is NaN or Inf: the largest exponent field over the range is not all ones
// (a branch-free reduction the compiler vectorizes; the slow scan runs only to name a culprit).
bool all_finite(const float* x, size_t n) {
  const uint32_t* u = reinterpret_cast<const uint32_t*>(x);
  uint32_t top = 0;
  for (size_t i = 0; i < n; i++) top = std::max(top, u[i] & 0x7f800000u);
  return top != 0x7f800000u;
}

// The writer runs behind training: lowest-but-one CPU priority for this thread and the idle-ish
// best-effort I/O class level 7 (Linux ioprio: class 2 = best effort, shifted by 13).
void lower_priority() {
  const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 10);
  (void)::syscall(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, tid, (2 << 13) | 7);
}
}  // namespace

bool is_own_temporary(const std::string& name) {
  auto all_of = [&](size_t from, size_t n, const char* set) {
    return name.size() >= from + n && name.substr(from, n).find_first_not_of(set) == std::string::npos;
  };
  // ".tmp-step-00000042-0123456789abcdef" (tmp_dir), "latest.tmp.<pid>" (write_text_atomic)
  if (name.size() == 35 && name.starts_with(".tmp-step-") && name[18] == '-')
    return all_of(10, 8, "0123456789") && all_of(19, 16, "0123456789abcdef");
  return name.size() > 11 && name.starts_with("latest.tmp.") && all_of(11, name.size() - 11, "0123456789");
}

Checkpointer::Checkpointer(const Config& cfg, ParallelModel& model, CheckpointStorage& storage, Communicator* world,
                           CheckpointRank who, const Manifest* resumed)
    : cfg_(cfg), model_(model), storage_(storage), who_(who), world_(world) {
  // One nonce per run names its temporary folders, so a save never mixes with leftovers of a run
  // that died mid-save (those are removed here, before any rank of this run writes; the folder is
  // this job's alone, ckpt/dir_lock.h). Files of any other kind are left where they are.
  if (who_.rank == 0) {
    std::random_device rd;
    nonce_ = fmt::format("{:08x}{:08x}", rd(), rd());
    for (const std::string& name : storage_.list())
      if (is_own_temporary(name)) storage_.remove_all(name);
    base_.lineage = resumed && !resumed->lineage.empty() ? resumed->lineage : fmt::format("{:08x}{:08x}", rd(), rd());
    base_.data_stream = data_stream_of(cfg_);
  }
  broadcast_text(world, nonce_, 0);

  // The snapshot: every state run this rank owns, three arrays each, back to back.
  const int tp = cfg_.parallel.tp;
  size_t at = 0;
  for (const StateRun& r : model_.state_runs()) {
    Slot s;
    s.chunk = r.chunk;
    s.spec_index = static_cast<size_t>(r.spec - model_.chunk(r.chunk).param_specs().data());
    s.tensor = r.head_copy ? kHeadCopyName : r.spec->name;
    const bool sharded = tp > 1 && r.spec->sharded();
    s.parts = sharded ? tp : 1, s.part = sharded ? who_.tp : 0;
    s.lo = r.lo, s.hi = r.hi;
    if (r.lo == 0 && r.hi == r.spec->numel()) s.shape.assign(r.spec->shape.begin(), r.spec->shape.end());
    else s.shape = {static_cast<int64_t>(r.hi - r.lo)};
    s.at = at;
    at += 3 * (r.hi - r.lo);
    slots_.push_back(std::move(s));
  }
  buf_elems_ = std::max<size_t>(at, 1);
  for (const StateRun& r : model_.state_runs()) gpu_state_ = gpu_state_ || r.device == Device::kCuda;
  bufs_[0].resize(buf_elems_);  // the second when a save first queues behind another
  if (gpu_state_) pin_host_memory(bufs_[0].data(), buf_elems_ * sizeof(float));

  // What every manifest of this run shares.
  base_.model_hash = model_config_hash(cfg_.model);
  base_.model = model_fields(cfg_);
  base_.config_toml = to_toml(cfg_);
  base_.dp = cfg_.parallel.dp, base_.tp = tp, base_.pp = cfg_.parallel.pp;
  base_.virtual_stages = cfg_.parallel.pp > 1 ? cfg_.parallel.virtual_stages : 1;
  // Splits as this run's TP cuts them (tp = 1: every tensor whole, "replicated").
  for (const ParamSpec& s : build_param_layout(cfg_.model, ModelShard{tp, 0}).specs) {
    ManifestTensor t{{s.full_shape.begin(), s.full_shape.end()}, split_name(tp > 1 ? s.split : ParamSplit::kReplicated)};
    if (s.name == token_embedding_name(cfg_.model) && cfg_.model.tie_embeddings && cfg_.parallel.pp > 1)
      base_.tensors[kHeadCopyName] = t;
    base_.tensors[s.name] = std::move(t);
  }
  copier_ = std::thread([this] { copier_main(); });
  writer_ = std::thread([this] { writer_main(); });
}

Checkpointer::~Checkpointer() {
  // Unwinding after an error (a peer died, a collective failed): rank 0 stops waiting for markers
  // that may never come; the unpublished folder is removed by the next run.
  if (std::uncaught_exceptions() > 0) abandon_.store(true);
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return jobs_.empty(); });
    stop_ = true;
  }
  cv_.notify_all();
  copier_.join();
  writer_.join();
  if (gpu_state_)
    for (AlignedBuffer<float>& b : bufs_) unpin_host_memory(b.data());
  stream_destroy(copy_stream_);
}

std::string Checkpointer::tmp_dir(int step) const { return fmt::format(".tmp-step-{:08d}-{}", step, nonce_); }

std::array<bool, 3> Checkpointer::at_boundary(bool a, bool b, bool c) {
  bool failed[2] = {false, false}, full = false, work = false;
  {
    // One snapshot under the lock: a writer frees its buffer together with setting its failure,
    // so a failure is always announced before a save that could reuse its parity starts.
    std::lock_guard<std::mutex> lock(mu_);
    for (int k = 0; k < 2; k++) failed[k] = std::exchange(unannounced_[k], false);
    full = buf_used_[0] && buf_used_[1];
    work = !jobs_.empty();
  }
  const std::vector<bool> any = any_rank_each(world_, {a, b, failed[0], failed[1], full, work, c});
  if (any[2] || any[3]) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Job& j : jobs_)
      if (any[2 + j.seq % 2]) announced_[j.seq % 2].store(j.seq);
  }
  full_anywhere_ = any[4];
  work_anywhere_ = any[5];
  return {any[0], any[1], any[6]};
}

void Checkpointer::drain() {
  if (!world_ || world_->size() == 1) {
    wait_idle();  // one process: rank 0 waits for no marker
  } else {
    for (at_boundary(false, false); work_anywhere_; at_boundary(false, false))
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  full_anywhere_ = work_anywhere_ = false;
}

Stage1Stats Checkpointer::save(int step, DataLoader::Position data, uint64_t tokens, float loss) {
  TraceScope span("checkpoint-stage1");
  const Stopwatch watch;
  Stage1Stats st;
  if (full_anywhere_) {  // agreed at this boundary: every rank skips
    st.skipped = true, st.in_flight = last_save_;
    st.seconds = watch.seconds();
    return st;
  }
  std::vector<StateRun> runs = model_.state_runs();
  MS_CHECK(runs.size() == slots_.size(), "checkpoint: the model's state runs changed ({} -> {})", slots_.size(),
           runs.size());
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (buf_used_[0] && buf_used_[1]) {  // not after an agreement said otherwise; kept as a guard
      const Stopwatch w;
      cv_.wait(lock, [&] { return !(buf_used_[0] && buf_used_[1]); });
      st.waited_seconds = w.seconds();
    }
    const int b = buf_used_[0] ? 1 : 0;
    if (bufs_[b].size() < buf_elems_) {  // no thread uses a free buffer
      bufs_[b].resize(buf_elems_);
      if (gpu_state_) pin_host_memory(bufs_[b].data(), buf_elems_ * sizeof(float));
    }
    buf_used_[b] = true;
    Job job{step, data, tokens, loss, 0.0, next_seq_++, b, false, std::move(runs), nullptr};
    // The copies start after the update's kernels, not when the host gets here.
    if (gpu_state_) job.ready = record_shared_event(model_.chunk(0).kernels().stream());
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
  last_save_ = step;
  full_anywhere_ = true, work_anywhere_ = true;  // until the next agreement
  for (const Slot& s : slots_) st.bytes += 3 * (s.hi - s.lo) * sizeof(float);
  if (!cfg_.checkpoint.async) {
    const Stopwatch w;
    drain();
    st.waited_seconds += w.seconds();
  }
  st.seconds = watch.seconds();
  return st;
}

double Checkpointer::finish_stage1() {
  std::unique_lock<std::mutex> lock(mu_);
  auto all_copied = [&] {
    for (const Job& j : jobs_)
      if (!j.copied) return false;
    return true;
  };
  if (all_copied()) return 0;
  TraceScope span("checkpoint-stage1-wait");
  const Stopwatch w;
  cv_.wait(lock, all_copied);
  return w.seconds();
}

void Checkpointer::copier_main() {
  restore_thread_affinity();  // not the CPU the training thread was pinned to; normal priority
  if (gpu_state_) bind_selected_device();  // its copies run on the process's GPU
  for (;;) {
    int step = 0, b_index = 0;
    int64_t seq = 0;
    std::vector<StateRun> runs;
    std::shared_ptr<void> ready;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto next = [&]() -> Job* {
        for (Job& j : jobs_)
          if (!j.copied) return &j;
        return nullptr;
      };
      cv_.wait(lock, [&] { return next() || stop_; });
      Job* j = next();
      if (!j) return;
      step = j->step, b_index = j->buf, seq = j->seq;
      runs = j->runs;
      ready = j->ready;
    }
    const Stopwatch w;
    ckpt_fault_point("slow_copy", who_.rank, step);
    ckpt_fault_point("stage1", who_.rank, step);
    float* b = bufs_[b_index].data();
    if (ready) {
      if (!copy_stream_.handle) copy_stream_ = stream_create();
      stream_wait(copy_stream_, Event{ready.get()});
    }
    for (size_t i = 0; i < runs.size(); i++) {
      const size_t n = runs[i].hi - runs[i].lo, at = slots_[i].at, bytes = n * sizeof(float);
      const Device d = runs[i].device;  // GPU runs: asynchronous on copy_stream_, waited for below
      copy_bytes(b + at, Device::kCpu, runs[i].param, d, bytes, copy_stream_);
      copy_bytes(b + at + n, Device::kCpu, runs[i].m, d, bytes, copy_stream_);
      copy_bytes(b + at + 2 * n, Device::kCpu, runs[i].v, d, bytes, copy_stream_);
    }
    if (ready) stream_sync(copy_stream_);
    if (ckpt_fault_point("nan_state", who_.rank, step) && !slots_.empty()) b[slots_[0].at] = std::nanf("");
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Job& j : jobs_)
        if (j.seq == seq) j.copy_seconds = w.seconds(), j.copied = true, j.runs.clear();
    }
    cv_.notify_all();
  }
}

void Checkpointer::wait_idle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return jobs_.empty(); });
}

std::vector<SaveOutcome> Checkpointer::take_outcomes() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(outcomes_, {});
}

void Checkpointer::writer_main() {
  restore_thread_affinity();  // not the CPU the training thread was pinned to
  lower_priority();
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (!jobs_.empty() && jobs_.front().copied) || (stop_ && jobs_.empty()); });
      if (jobs_.empty()) return;
      const Job& front = jobs_.front();
      job = Job{front.step, front.data, front.tokens, front.loss, front.copy_seconds, front.seq, front.buf, true, {},
                nullptr};
    }
    const Stopwatch watch;
    std::vector<ManifestFile> recs;
    SaveOutcome out = write_own(job, bufs_[job.buf].data(), recs);
    const bool own_failed = !out.ok;
    if (who_.rank == 0) out = commit(job, out, std::move(recs));
    out.seconds = watch.seconds();
    {
      std::lock_guard<std::mutex> lock(mu_);
      outcomes_.push_back(std::move(out));
      jobs_.pop_front();
      buf_used_[job.buf] = false;
      if (own_failed && who_.rank != 0) unannounced_[job.seq % 2] = true;  // told at the next boundary
    }
    cv_.notify_all();
  }
}

SaveOutcome Checkpointer::write_own(const Job& job, const float* b, std::vector<ManifestFile>& recs) {
  SaveOutcome out;
  out.step = job.step;
  const std::string dir = tmp_dir(job.step), marker = fmt::format("{}/rank-{:05d}", dir, who_.rank);
  try {
    storage_.make_dir(dir);
    ckpt_fault_point("write_error", who_.rank, job.step);
    ckpt_fault_point("slow_write", who_.rank, job.step);
    // Non-finite state is never published (the step's norm check makes this rare: it catches
    // what the optimizer itself produced).
    const Stopwatch check_watch;
    for (const Slot& s : slots_) {
      const size_t n = s.hi - s.lo;
      if (all_finite(b + s.at, 3 * n)) continue;
      for (size_t i = 0; i < 3 * n; i++)
        MS_CHECK(std::isfinite(b[s.at + i]), "rank {}: tensor {} holds a non-finite {} value ({}) at step {}",
                 who_.rank, s.tensor, state_kind_name(kStateKinds[i / n]), b[s.at + i], job.step);
    }
    const double check_s = check_watch.seconds();
    const Stopwatch write_watch;
    // Tensors cut over the TP group in one file, those replicated over it (held by TP rank 0) in
    // another, so a TP rank restoring under the same layout reads its own part and only the small
    // replicated file of TP rank 0.
    for (const bool sharded_file : {true, false}) {
      ManifestFile rec;
      rec.name = fmt::format("rank-{:05d}{}.safetensors", who_.rank, sharded_file ? "" : "-replicated");
      rec.rank = who_.rank, rec.dp = who_.dp, rec.tp = who_.tp, rec.pp = who_.pp;
      std::vector<StView> views;
      for (const Slot& s : slots_) {
        if ((s.parts > 1) != sharded_file && cfg_.parallel.tp > 1) continue;
        if (!sharded_file && cfg_.parallel.tp == 1) continue;  // tp = 1: one file
        const size_t n = s.hi - s.lo;
        for (int k = 0; k < 3; k++) {
          ManifestEntry e;
          e.kind = kStateKinds[k];
          e.tensor = s.tensor, e.parts = s.parts, e.part = s.part, e.lo = s.lo, e.hi = s.hi;
          e.key = fmt::format("{}/{}/{}/{}", state_kind_name(e.kind), s.tensor, s.part, s.lo);
          views.push_back({e.key, DType::kF32, s.shape, b + s.at + k * n});
          rec.entries.push_back(std::move(e));
        }
      }
      if (views.empty()) continue;
      std::string header;
      const std::vector<ByteRange> parts = safetensors_parts(
          views, {{"format", "megascale-checkpoint-shard"}, {"step", std::to_string(job.step)},
                  {"rank", std::to_string(who_.rank)}}, header);
      for (const ByteRange& r : parts) rec.bytes += r.size;
      const uint64_t h = storage_.write_file(dir + "/" + rec.name, parts,
                                             [&] { ckpt_fault_point("mid_file", who_.rank, job.step); });
      rec.xxh64 = xxh64_hex(h);
      out.bytes += rec.bytes;
      recs.push_back(std::move(rec));
    }
    // Rank 0 keeps its records in memory; the others leave them for it in a marker.
    if (who_.rank != 0) storage_.write_text(marker + ".json", manifest_files_to_json(recs));
    out.ok = true;
    out.message = fmt::format("rank {} wrote {} file(s) ({:.1f} MiB; finite check {:.2f} s, write + hash + fsync {:.2f} s)",
                              who_.rank, recs.size(), out.bytes / 1048576.0, check_s, write_watch.seconds());
  } catch (const std::exception& e) {
    out.ok = false;
    out.message = e.what();
    // The reason for rank 0's message, where the disk takes it (the failure itself reaches rank 0
    // through the next step boundary's agreement in any case).
    if (who_.rank != 0) {
      try {
        storage_.write_text(marker + ".failed", e.what());
      } catch (const std::exception& e2) {
        out.message += fmt::format(" (and its failure marker could not be written: {})", e2.what());
      }
    }
    logger().error("checkpoint step {}: rank {}: {}", job.step, who_.rank, out.message);
  }
  return out;
}

std::string Checkpointer::wait_for_markers(const Job& job, Manifest& m) {
  const std::string dir = tmp_dir(job.step);
  std::string problem;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(cfg_.checkpoint.timeout_s * 1e3));
  for (int r = 0; r < who_.world; r++) {
    if (r == who_.rank) continue;
    const std::string marker = fmt::format("{}/rank-{:05d}", dir, r);
    for (;;) {
      if (storage_.exists(marker + ".json")) {
        try {
          for (ManifestFile& f : parse_manifest_files(storage_.read_text(marker + ".json"), marker + ".json"))
            m.files.push_back(std::move(f));
        } catch (const std::exception& e) {
          if (problem.empty()) problem = e.what();
        }
        break;
      }
      if (storage_.exists(marker + ".failed")) {
        if (problem.empty()) problem = fmt::format("rank {}: {}", r, storage_.read_text(marker + ".failed"));
        break;
      }
      if (announced_[job.seq % 2].load() == job.seq) {
        if (problem.empty())
          problem = "a rank's writer failed this save (announced at a step boundary, needing no disk space; that "
                    "rank's error names the reason)";
        return problem;
      }
      if (abandon_.load()) {
        if (problem.empty()) problem = "the run is ending after an error";
        return problem;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        if (problem.empty())
          problem = fmt::format("rank {}'s file did not arrive within checkpoint.timeout_s={} s", r,
                                cfg_.checkpoint.timeout_s);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return problem;
}

SaveOutcome Checkpointer::commit(const Job& job, const SaveOutcome& own, std::vector<ManifestFile> own_files) {
  SaveOutcome out;
  out.step = job.step, out.whole = true, out.bytes = own.bytes;
  const std::string dir = tmp_dir(job.step), name = checkpoint_dir_name(job.step);
  Manifest m = base_;
  m.step = job.step, m.data = job.data, m.tokens = job.tokens, m.loss = job.loss;
  // Its own outcome as rank 0 holds it; every other rank's marker: its file's record, or why it
  // failed (waited for even after a failure, so the folder is removed only once nobody writes into
  // it any more, unless a failure was announced).
  std::string problem = own.ok ? std::string() : fmt::format("rank {}: {}", who_.rank, own.message);
  for (ManifestFile& f : own_files) m.files.push_back(std::move(f));
  const std::string others = wait_for_markers(job, m);
  problem += (problem.empty() || others.empty() ? "" : "; ") + others;
  try {
    if (!problem.empty()) MS_FAIL("{}", problem);
    std::sort(m.files.begin(), m.files.end(), [](const ManifestFile& a, const ManifestFile& b) { return a.name < b.name; });
    const std::string gap = coverage_problem(m);
    MS_CHECK(gap.empty(), "the ranks' files do not hold the whole state: {}", gap);
    for (int r = 0; r < who_.world; r++) storage_.remove_all(fmt::format("{}/rank-{:05d}.json", dir, r));
    storage_.write_text(dir + "/manifest.json", manifest_to_json(m));
    ckpt_fault_point("before_publish", who_.rank, job.step);
    storage_.publish_dir(dir, name);
    ckpt_fault_point("before_latest", who_.rank, job.step);
    storage_.write_text("latest", name + "\n");
    apply_retention(job.step);
    out.ok = true;
    uint64_t total = 0;
    for (const ManifestFile& f : m.files) total += f.bytes;
    out.message = fmt::format("published {}/{} ({} files, {:.1f} MiB; stage-1 copy {:.1f} ms beside training; {})",
                              storage_.describe(), name, m.files.size(), total / 1048576.0, job.copy_seconds * 1e3,
                              own.message);
  } catch (const std::exception& e) {
    out.ok = false;
    out.message = fmt::format("step {} not published ({} still names the previous checkpoint): {}", job.step,
                              storage_.describe() + "/latest", e.what());
    try {
      storage_.remove_all(dir);
    } catch (const std::exception&) {
    }
  }
  return out;
}

void Checkpointer::apply_retention(int newest) {
  // Only this lineage's checkpoints count and go: another job's step folders (or ones without a
  // readable manifest) are never removed.
  std::vector<int> steps;
  for (const std::string& n : storage_.list()) {
    const int s = checkpoint_step_of(n);
    if (s < 0 || !storage_.exists(n + "/manifest.json")) continue;
    std::string text;
    try {
      text = storage_.read_text(n + "/manifest.json");
    } catch (const std::exception&) {
      continue;
    }
    if (manifest_lineage(text) == base_.lineage) steps.push_back(s);
  }
  std::sort(steps.begin(), steps.end());
  const int K = cfg_.checkpoint.keep_last, M = cfg_.checkpoint.keep_every;
  for (size_t i = 0; i < steps.size(); i++) {
    const int s = steps[i];
    const bool recent = steps.size() - i <= static_cast<size_t>(K);
    if (s == newest || recent || (M > 0 && s % M == 0)) continue;
    storage_.remove_all(checkpoint_dir_name(s));
  }
}

}  // namespace ms
