// communicator.cpp: the backend-independent half of communicator.h: argument checks on the
// caller's thread, sequence numbers, the trace records, and running each op on the communicator's
// own thread (comm_thread.h) with its deadline and its error message.
#include "comm/communicator.h"

#include <algorithm>  // std::sort, std::adjacent_find, std::find
#include <cstdint>

#include "base/clock.h"         // steady_ns, SteadyClock
#include "comm/comm_fatal.h"   // report_comm_failure, note_comm_timeout
#include "comm/comm_thread.h"  // WorkState, CommThread
#include "comm/staging.h"      // HostStaging, StagedCopy
#include "obs/watchdog.h"       // WatchedWait
#include "obs/trace_sink.h"     // TraceSink

namespace ms {

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

Communicator::Communicator() : thread_(std::make_unique<detail::CommThread>()) { thread_->set_label(name_); }

Communicator::~Communicator() = default;  // thread_'s destructor runs what is still queued and joins it

void Communicator::set_identity(std::string name, int rank, std::vector<int> world_ranks,
                                std::chrono::milliseconds timeout) {
  name_ = std::move(name);
  rank_ = rank;
  size_ = static_cast<int>(world_ranks.size());
  world_ranks_ = std::move(world_ranks);
  timeout_ = timeout;
  op_segs_ = {};  // named after the group
  detail::note_comm_timeout(timeout);
  thread_->set_label(name_);
}

std::unique_ptr<Communicator> Communicator::new_group(const std::vector<int>& members, const std::string& name) {
  WatchedWait watched("new_group", name_, timeout_);  // MPI_Comm_create_group has no timeout of its own
  std::unique_ptr<Communicator> g = make_group(members, name);
  g->rank_labels_ = rank_labels_;
  g->stage_host_ = stage_host_;
  return g;
}

std::unique_ptr<Communicator> Communicator::split(const std::vector<int>& members, const std::string& name) {
  WatchedWait watched("split", name_, timeout_);
  std::unique_ptr<Communicator> g = make_split(members, name);
  g->rank_labels_ = rank_labels_;
  g->stage_host_ = stage_host_;
  return g;
}

std::string Communicator::describe_world_rank(int world_rank) const {
  if (rank_labels_ && world_rank >= 0 && world_rank < static_cast<int>(rank_labels_->size()))
    return fmt::format("world rank {} ({})", world_rank, (*rank_labels_)[world_rank]);
  return fmt::format("world rank {}", world_rank);
}

void Communicator::run_on_comm_thread(const std::function<void()>& fn) { thread_->run(fn); }

void Communicator::drain() { thread_->drain(); }

void Communicator::throw_if_broken() const {
  if (broken_) throw CommError(fmt::format("group '{}' is unusable after an earlier failure: {}", name_, broken_what_));
}

// ---------------------------------------------------------------------------------------------
// Starting ops: validate on the caller's thread, number, record, queue.

namespace {

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return an && bn && pa < pb + bn && pb < pa + an;
}

}  // namespace

CommWork Communicator::start_all_reduce(void* buf, size_t count, DType t, ReduceOp op, const StreamOrder& on) {
  MS_CHECK(buf || count == 0, "all_reduce on group '{}': null buffer", name_);
  Op o;
  o.kind = OpKind::kAllReduce, o.name = "all_reduce", o.out = buf, o.count = count, o.dtype = t, o.reduce = op;
  return submit(o, count * dtype_size(t), on);
}

CommWork Communicator::start_reduce_scatter(const void* in, void* out, size_t shard, DType t, ReduceOp op,
                                            const StreamOrder& on) {
  const size_t es = dtype_size(t);
  MS_CHECK((in && out) || shard == 0, "reduce_scatter on group '{}': null buffer", name_);
  const void* own = static_cast<const char*>(in) + rank_ * shard * es;
  MS_CHECK(out == own || !overlaps(in, size_ * shard * es, out, shard * es),
           "reduce_scatter on group '{}': out overlaps in without being in + rank*shard", name_);
  Op o;
  o.kind = OpKind::kReduceScatter, o.name = "reduce_scatter", o.in = in, o.out = out, o.count = shard;
  o.dtype = t, o.reduce = op;
  return submit(o, size_ * shard * es, on);
}

CommWork Communicator::start_all_gather(const void* in, void* out, size_t shard, DType t, const StreamOrder& on) {
  const size_t es = dtype_size(t);
  MS_CHECK((in && out) || shard == 0, "all_gather on group '{}': null buffer", name_);
  const void* own = static_cast<const char*>(out) + rank_ * shard * es;
  MS_CHECK(in == own || !overlaps(in, shard * es, out, size_ * shard * es),
           "all_gather on group '{}': in overlaps out without being out + rank*shard", name_);
  Op o;
  o.kind = OpKind::kAllGather, o.name = "all_gather", o.in = in, o.out = out, o.count = shard, o.dtype = t;
  return submit(o, size_ * shard * es, on);
}

CommWork Communicator::start_broadcast(void* buf, size_t count, DType t, int root, const StreamOrder& on) {
  MS_CHECK(buf || count == 0, "broadcast on group '{}': null buffer", name_);
  MS_CHECK(root >= 0 && root < size_, "broadcast on group '{}': root {} is not a rank of the group (size {})", name_,
           root, size_);
  Op o;
  o.kind = OpKind::kBroadcast, o.name = "broadcast", o.out = buf, o.count = count, o.dtype = t, o.peer = root;
  return submit(o, count * dtype_size(t), on);
}

int Communicator::check_group_members(const std::vector<int>& members, const std::string& name,
                                      std::vector<int>& world_ranks) const {
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  MS_CHECK(!members.empty() && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() &&
               sorted.front() >= 0 && sorted.back() < size_,
           "new_group '{}' of group '{}': members must be distinct ranks below {}", name, name_, size_);
  const auto me = std::find(members.begin(), members.end(), rank_);
  MS_CHECK(me != members.end(), "new_group '{}' of group '{}': rank {} is not a member (only members call it)",
           name, name_, rank_);
  world_ranks.clear();
  for (int m : members) world_ranks.push_back(world_ranks_[m]);
  return static_cast<int>(me - members.begin());
}

std::unique_ptr<Communicator> Communicator::make_child(const std::vector<int>& members, const std::string& name,
                                                     const MakeChild& make) {
  std::vector<int> wr;
  const int me = check_group_members(members, name, wr);
  std::unique_ptr<Communicator> child;
  run_on_comm_thread([&] {
    throw_if_broken();
    child = make(me, wr);
  });
  return child;
}

void Communicator::check_point_to_point(const char* op, const void* buf, size_t bytes, int peer) const {
  MS_CHECK(buf || bytes == 0, "{} on group '{}': null buffer", op, name_);
  MS_CHECK(peer >= 0 && peer < size_ && peer != rank_, "{} on group '{}': peer {} is not another rank of the group "
           "(rank {}, size {})", op, name_, peer, rank_, size_);
}

CommWork Communicator::start_send(const void* buf, size_t bytes, int peer, uint32_t tag, const StreamOrder& on) {
  check_point_to_point("send", buf, bytes, peer);
  Op o;
  o.kind = OpKind::kSend, o.name = "send", o.in = buf, o.count = bytes, o.peer = peer, o.tag = tag;
  return submit(o, bytes, on);
}

CommWork Communicator::start_recv(void* buf, size_t bytes, int peer, uint32_t tag, const StreamOrder& on) {
  check_point_to_point("recv", buf, bytes, peer);
  Op o;
  o.kind = OpKind::kRecv, o.name = "recv", o.out = buf, o.count = bytes, o.peer = peer, o.tag = tag;
  return submit(o, bytes, on);
}

CommWork Communicator::start_barrier() {
  Op o;
  o.kind = OpKind::kBarrier, o.name = "barrier";
  return submit(o, 0, {});
}

void Communicator::op_enqueued(Op& op, std::shared_ptr<void> done) {
  if (op.work) op.work->enqueued(std::move(done));
}

CommWork Communicator::submit(Op op, size_t bytes, const StreamOrder& on) {
  MS_CHECK(op.dtype == DType::kF32 || op.dtype == DType::kBF16, "{} on group '{}': element type {} is not fp32 or bf16",
           op.name, name_, dtype_name(op.dtype));
  op.device = on.device;
  if (on.device == Device::kCuda) {
    // The producer's work so far, as an event on its stream (recorded here, on the caller's thread).
    require_device(Device::kCuda);
    op.after = record_shared_event(on.after);
  }
  auto state = std::make_shared<detail::WorkState>();
  op.work = state.get();
  state->posted_kind = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
  state->thread = thread_.get();
  std::lock_guard lk(submit_mu_);
  if (send_seq_.size() != static_cast<size_t>(size_)) send_seq_.assign(size_, 0), recv_seq_.assign(size_, 0);
  if (op.kind == OpKind::kSend) op.seq = send_seq_[op.peer]++;
  else if (op.kind == OpKind::kRecv) op.seq = recv_seq_[op.peer]++;
  else op.seq = coll_seq_++;
  TraceRecord rec;
  rec.seq = op.seq, rec.name = op.name, rec.group = name_, rec.bytes = bytes, rec.peer = op.peer;
  std::string_view& seg = op_segs_[static_cast<size_t>(op.kind)];  // looked up once per group and kind
  if (seg.empty()) seg = comm_segment(name_, op.name);
  rec.enqueue_ns = steady_ns(), rec.status = "queued", rec.seg = seg;
  const uint64_t id = TraceSink::get().open(TraceTrack::kComm, std::move(rec));
  thread_->post([this, op, state, id]() mutable { run_op(op, state, id); });
  return CommWork(state);
}

namespace {

void finish(uint64_t record, const std::string& status, bool ok, detail::WorkState& state) {
  TraceSink::get().close(TraceTrack::kComm, record, steady_ns(), status);
  if (!ok) report_comm_failure(status);  // the fatal policy (comm_fatal.h) does not return
  state.finish(ok ? nullptr : std::make_exception_ptr(CommError(status)));
}

}  // namespace

void Communicator::run_op(Op& op, const std::shared_ptr<detail::WorkState>& state, uint64_t record) {
  const bool p2p = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
  if (!p2p) thread_->complete_posted();
  op.deadline = SteadyClock::now() + timeout_;
  TraceSink::get().update(TraceTrack::kComm, record, [&](TraceRecord& r) {
    r.start_ns = steady_ns(), r.status = "running";
    r.deadline_ns = r.start_ns + std::chrono::nanoseconds(timeout_).count();  // the watchdog's input
  });
  std::string status = "ok";
  bool posted = false;
  const bool staged = !device_native() && op.kind != OpKind::kBarrier && (op.device != Device::kCpu || stage_host_);
  const bool ok = run_step(op, [&] {
    if (op.after && !device_native()) event_sync(Event{op.after.get()});  // the producer's device work
    if (staged) stage_in(op);
    if (p2p && post(op)) {
      posted = true;
    } else {
      execute(op);
      if (op.staged) staging_->stage_out(*op.staged);
    }
  }, status);
  if (!posted) op.staged.reset(), op.after.reset();  // back to the pool before the waiter runs on
  if (ok && posted) {
    thread_->defer_posted_completion(state.get(), [this, op, state, record]() mutable {
      std::string st = "ok";
      const bool fine = run_step(op, [&] {
        complete(op);
        if (op.staged) staging_->stage_out(*op.staged);
      }, st);
      op.handle.reset(), op.staged.reset(), op.after.reset();
      finish(record, st, fine, *state);
    });
    return;
  }
  finish(record, status, ok, *state);
}

void Communicator::stage_in(Op& op) {
  if (!staging_) staging_ = std::make_unique<HostStaging>(op.device);
  MS_CHECK(staging_->device() == op.device, "{} on group '{}': buffers on {} after staging for {}", op.name, name_,
           device_name(op.device), device_name(staging_->device()));
  const size_t es = op.kind == OpKind::kSend || op.kind == OpKind::kRecv ? 1 : dtype_size(op.dtype);
  const size_t n = op.count * es, all = n * static_cast<size_t>(size_);
  StageRange read, write;
  switch (op.kind) {
    case OpKind::kAllReduce:
    case OpKind::kBroadcast: read = write = {op.out, n}; break;
    case OpKind::kReduceScatter: read = {op.in, all}, write = {op.out, n}; break;
    case OpKind::kAllGather: read = {op.in, n}, write = {op.out, all}; break;
    case OpKind::kSend: read = {op.in, n}; break;
    case OpKind::kRecv: write = {op.out, n}; break;
    case OpKind::kBarrier: return;
  }
  if (read.bytes == 0 && write.bytes == 0) return;  // nothing moves: the engine sees the op as it is
  op.staged = staging_->stage_in(read, write);
  op.in = op.staged->host(op.in);
  op.out = op.staged->host(op.out);
}

bool Communicator::run_step(Op& op, const std::function<void()>& body, std::string& status) {
  if (broken_) {
    status = fmt::format("{}:{}: {} on group '{}' (seq {}) not run: the group is unusable after an earlier "
                         "failure: {}", __FILE__, __LINE__, op.name, name_, op.seq, broken_what_);
    return false;
  }
  std::string what;
  try {
    op.waiting_on = -1;
    body();
    return true;
  } catch (const std::exception& e) {
    what = e.what();
    if (what.empty()) what = "unknown error";
  } catch (...) {
    what = "unknown non-standard exception";
  }
  std::string peer;
  if (op.waiting_on >= 0 && op.waiting_on < size_)
    peer = fmt::format(" waiting on peer {} ({})", op.waiting_on, describe_world_rank(world_ranks_[op.waiting_on]));
  status = fmt::format("{}:{}: {} on group '{}' ({}, seq {}, rank {} of {}) failed{}: {}", __FILE__, __LINE__, op.name,
                       name_, backend_name(), op.seq, rank_, size_, peer, what);
  broken_ = true;
  broken_what_ = status;
  return false;
}

}  // namespace ms
