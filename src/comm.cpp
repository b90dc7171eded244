// comm: the backend-independent half of comm.h: dtype helpers, CommEnv from the environment, the
// per-process communication thread (one FIFO queue for every group), CommWork, the trace ring
// buffer, the "self" backend (world size 1) and init_world's dispatch to Gloo or MPI.
#include "comm.h"

#include <algorithm>  // std::min
#include <charconv>   // std::from_chars
#include <condition_variable>
#include <cstdlib>  // getenv, atexit
#include <cstring>  // memmove
#include <deque>
#include <exception>
#include <thread>

#include <nlohmann/json.hpp>

#include "atomic_file.h"
#include "comm_gloo.h"
#include "comm_mpi.h"

namespace ms {

size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }
const char* dtype_name(DType t) { return t == DType::kF32 ? "f32" : "bf16"; }
const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "max"; }

// ---------------------------------------------------------------------------------------------
// CommEnv

namespace {

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int parse_env_int(const char* name, const char* value, int min_value) {
  int out = 0;
  const char* end = value + std::strlen(value);
  auto [p, ec] = std::from_chars(value, end, out);
  MS_CHECK(ec == std::errc() && p == end && out >= min_value,
           "environment variable {}='{}' is not an integer >= {}", name, value, min_value);
  return out;
}

// The first of `names` that is set, parsed; `fallback` when none is.
int first_env_int(std::initializer_list<const char*> names, int min_value, int fallback) {
  for (const char* n : names)
    if (const char* v = env_or_null(n)) return parse_env_int(n, v, min_value);
  return fallback;
}

}  // namespace

CommEnv CommEnv::from_environment() {
  CommEnv env;
  if (const char* b = env_or_null("MEGASCALE_BACKEND")) {
    env.backend = b;
    MS_CHECK(env.backend == "gloo" || env.backend == "mpi" || env.backend == "self",
             "environment variable MEGASCALE_BACKEND='{}' is not one of gloo, mpi, self", env.backend);
  } else if (env_or_null("OMPI_COMM_WORLD_SIZE") || env_or_null("PMIX_RANK")) {
    env.backend = "mpi";
  } else if (env_or_null("WORLD_SIZE")) {
    env.backend = "gloo";
  } else {
    env.backend = "self";
  }
  if (env.backend == "mpi") {
    env.rank = first_env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"}, 0, 0);
    // 0: not in the environment; make_mpi_world takes the size from MPI itself.
    env.world_size = first_env_int({"OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, 1, 0);
    env.local_rank = first_env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, 0, 0);
    env.local_world_size = first_env_int({"OMPI_COMM_WORLD_LOCAL_SIZE"}, 1, 1);
  } else {
    env.rank = first_env_int({"RANK"}, 0, 0);
    env.world_size = first_env_int({"WORLD_SIZE"}, 1, 1);
    env.local_rank = first_env_int({"LOCAL_RANK"}, 0, env.rank);
    env.local_world_size = first_env_int({"LOCAL_WORLD_SIZE"}, 1, env.world_size);
    MS_CHECK(env.rank < env.world_size, "environment variable RANK={} is not below WORLD_SIZE={}", env.rank,
             env.world_size);
  }
  if (const char* v = env_or_null("MEGASCALE_STORE")) env.store = v;
  if (const char* v = env_or_null("MEGASCALE_STORE_PASSWORD")) env.store_password = v;
  if (const char* v = env_or_null("MEGASCALE_RUN_ID")) env.run_id = v;
  if (const char* v = env_or_null("MEGASCALE_HOST")) env.hostname = v;
  return env;
}

// ---------------------------------------------------------------------------------------------
// The trace ring buffer: the last `capacity` ops of this process, each addressed by a global id
// (id % capacity is its slot; an update for an id that has been overwritten is dropped).

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class TraceRing {
 public:
  static TraceRing& get() {
    static TraceRing* ring = new TraceRing();  // never destroyed: ops may finish during exit
    return *ring;
  }
  void set_capacity(size_t cap) {
    std::lock_guard lk(m_);
    cap = std::max<size_t>(cap, 1);
    if (cap == recs_.size()) return;
    recs_.assign(cap, CommRecord{});
    ids_.assign(cap, kNone);
  }
  uint64_t open(CommRecord r) {
    std::lock_guard lk(m_);
    if (recs_.empty()) { recs_.assign(4096, CommRecord{}); ids_.assign(4096, kNone); }
    const uint64_t id = next_id_++;
    recs_[id % recs_.size()] = std::move(r);
    ids_[id % recs_.size()] = id;
    return id;
  }
  template <class F>
  void update(uint64_t id, F&& f) {
    std::lock_guard lk(m_);
    if (recs_.empty() || ids_[id % recs_.size()] != id) return;
    f(recs_[id % recs_.size()]);
  }
  std::vector<CommRecord> snapshot() {
    std::lock_guard lk(m_);
    std::vector<CommRecord> out;
    const size_t cap = recs_.size();
    const uint64_t first = next_id_ > cap ? next_id_ - cap : 0;
    for (uint64_t id = first; id < next_id_; id++)
      if (ids_[id % cap] == id) out.push_back(recs_[id % cap]);
    return out;
  }

 private:
  static constexpr uint64_t kNone = ~0ull;
  std::mutex m_;
  std::vector<CommRecord> recs_;
  std::vector<uint64_t> ids_;
  uint64_t next_id_ = 0;
};

}  // namespace

std::vector<CommRecord> comm_trace() { return TraceRing::get().snapshot(); }

void write_comm_trace(const std::string& path) {
  nlohmann::json arr = nlohmann::json::array();
  for (const CommRecord& r : comm_trace()) {
    arr.push_back({{"seq", r.seq}, {"op", r.op}, {"group", r.group}, {"bytes", r.bytes}, {"peer", r.peer},
                   {"enqueue_ns", r.enqueue_ns}, {"start_ns", r.start_ns}, {"end_ns", r.end_ns},
                   {"status", r.status}});
  }
  // Error texts may carry arbitrary bytes from a library: replace invalid UTF-8 rather than fail.
  const std::string text = arr.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  write_file_atomic(path, {{text.data(), text.size()}});
}

// ---------------------------------------------------------------------------------------------
// CommWork

namespace detail {
struct WorkState {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  bool posted_kind = false;      // a send/recv: may sit posted until something completes it
  bool flush_requested = false;  // a waiter has queued the completion of posted ops
  std::exception_ptr error;
  void finish(std::exception_ptr e) {
    std::lock_guard lk(m);
    error = std::move(e);
    done = true;
    cv.notify_all();
  }
};
}  // namespace detail

namespace {
void request_completion(detail::WorkState& st);  // below, with the comm thread
}

void CommWork::wait() {
  MS_CHECK(state_, "CommWork::wait on an empty handle");
  request_completion(*state_);
  std::unique_lock lk(state_->m);
  state_->cv.wait(lk, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

bool CommWork::done() const {
  if (!state_) return true;
  request_completion(*state_);
  std::lock_guard lk(state_->m);
  return state_->done;
}

// ---------------------------------------------------------------------------------------------
// The communication thread: one per process, one FIFO queue shared by every communicator.
// Started on first use; an atexit handler drains the queue and joins it. After that, work runs
// inline on the caller's thread (only destructors of objects outliving exit get there).

namespace {

class CommThread {
 public:
  static CommThread& get() {
    static CommThread* t = [] {
      auto* p = new CommThread();
      std::atexit([] { CommThread::get().shutdown(); });
      return p;
    }();
    return *t;
  }

  void post(std::function<void()> fn) {
    {
      std::lock_guard lk(m_);
      if (!stopped_) {
        q_.push_back(std::move(fn));
        cv_.notify_one();
        return;
      }
    }
    fn();  // after shutdown
  }

  // Runs fn on the thread and waits for it; rethrows what it threw.
  void run(const std::function<void()>& fn) {
    if (std::this_thread::get_id() == thread_.get_id()) return fn();
    auto st = std::make_shared<detail::WorkState>();
    post([&fn, st] {
      std::exception_ptr e;
      try {
        fn();
      } catch (...) {
        e = std::current_exception();
      }
      st->finish(e);
    });
    CommWork(st).wait();
  }

 private:
  CommThread() : thread_([this] { loop(); }) {}

  void loop() {
    std::unique_lock lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return stopping_ || !q_.empty(); });
      if (q_.empty()) return;  // stopping and drained
      auto fn = std::move(q_.front());
      q_.pop_front();
      lk.unlock();
      fn();  // tasks catch their own exceptions
      lk.lock();
    }
  }

  void shutdown() {
    {
      std::lock_guard lk(m_);
      if (stopping_) return;
      stopping_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
    std::lock_guard lk(m_);
    stopped_ = true;
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
  bool stopping_ = false, stopped_ = false;
  std::thread thread_;
};

// Completions of posted send/recv ops, in post order (comm thread only).
std::deque<std::function<void()>> g_posted;

void complete_posted() {
  while (!g_posted.empty()) {
    auto f = std::move(g_posted.front());
    g_posted.pop_front();
    f();
  }
}

// A waiter on a send/recv queues the completion of every posted op (once): the op itself was
// queued earlier, so it is posted by then.
void request_completion(detail::WorkState& st) {
  {
    std::lock_guard lk(st.m);
    if (!st.posted_kind || st.done || st.flush_requested) return;
    st.flush_requested = true;
  }
  CommThread::get().post(complete_posted);
}

}  // namespace

void Communicator::run_on_comm_thread(const std::function<void()>& fn) {
  CommThread::get().run([&fn] {
    complete_posted();
    fn();
  });
}

void Communicator::drain() { run_on_comm_thread([] {}); }

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

CommWork Communicator::start_all_reduce(void* buf, size_t count, DType t, ReduceOp op) {
  MS_CHECK(buf || count == 0, "all_reduce on group '{}': null buffer", name_);
  Op o;
  o.kind = OpKind::kAllReduce, o.name = "all_reduce", o.out = buf, o.count = count, o.dtype = t, o.reduce = op;
  return submit(o, count * dtype_size(t));
}

CommWork Communicator::start_reduce_scatter(const void* in, void* out, size_t shard, DType t, ReduceOp op) {
  const size_t es = dtype_size(t);
  MS_CHECK((in && out) || shard == 0, "reduce_scatter on group '{}': null buffer", name_);
  const void* own = static_cast<const char*>(in) + rank_ * shard * es;
  MS_CHECK(out == own || !overlaps(in, size_ * shard * es, out, shard * es),
           "reduce_scatter on group '{}': out overlaps in without being in + rank*shard", name_);
  Op o;
  o.kind = OpKind::kReduceScatter, o.name = "reduce_scatter", o.in = in, o.out = out, o.count = shard;
  o.dtype = t, o.reduce = op;
  return submit(o, size_ * shard * es);
}

CommWork Communicator::start_all_gather(const void* in, void* out, size_t shard, DType t) {
  const size_t es = dtype_size(t);
  MS_CHECK((in && out) || shard == 0, "all_gather on group '{}': null buffer", name_);
  const void* own = static_cast<const char*>(out) + rank_ * shard * es;
  MS_CHECK(in == own || !overlaps(in, shard * es, out, size_ * shard * es),
           "all_gather on group '{}': in overlaps out without being out + rank*shard", name_);
  Op o;
  o.kind = OpKind::kAllGather, o.name = "all_gather", o.in = in, o.out = out, o.count = shard, o.dtype = t;
  return submit(o, size_ * shard * es);
}

CommWork Communicator::start_broadcast(void* buf, size_t count, DType t, int root) {
  MS_CHECK(buf || count == 0, "broadcast on group '{}': null buffer", name_);
  MS_CHECK(root >= 0 && root < size_, "broadcast on group '{}': root {} is not a rank of the group (size {})", name_,
           root, size_);
  Op o;
  o.kind = OpKind::kBroadcast, o.name = "broadcast", o.out = buf, o.count = count, o.dtype = t, o.peer = root;
  return submit(o, count * dtype_size(t));
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

void Communicator::check_point_to_point(const char* op, const void* buf, size_t bytes, int peer) const {
  MS_CHECK(buf || bytes == 0, "{} on group '{}': null buffer", op, name_);
  MS_CHECK(peer >= 0 && peer < size_ && peer != rank_, "{} on group '{}': peer {} is not another rank of the group "
           "(rank {}, size {})", op, name_, peer, rank_, size_);
}

CommWork Communicator::start_send(const void* buf, size_t bytes, int peer, uint32_t tag) {
  check_point_to_point("send", buf, bytes, peer);
  Op o;
  o.kind = OpKind::kSend, o.name = "send", o.in = buf, o.count = bytes, o.peer = peer, o.tag = tag;
  return submit(o, bytes);
}

CommWork Communicator::start_recv(void* buf, size_t bytes, int peer, uint32_t tag) {
  check_point_to_point("recv", buf, bytes, peer);
  Op o;
  o.kind = OpKind::kRecv, o.name = "recv", o.out = buf, o.count = bytes, o.peer = peer, o.tag = tag;
  return submit(o, bytes);
}

CommWork Communicator::start_barrier() {
  Op o;
  o.kind = OpKind::kBarrier, o.name = "barrier";
  return submit(o, 0);
}

CommWork Communicator::submit(Op op, size_t bytes) {
  auto state = std::make_shared<detail::WorkState>();
  state->posted_kind = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
  std::lock_guard lk(submit_mu_);
  if (send_seq_.size() != static_cast<size_t>(size_)) send_seq_.assign(size_, 0), recv_seq_.assign(size_, 0);
  if (op.kind == OpKind::kSend) op.seq = send_seq_[op.peer]++;
  else if (op.kind == OpKind::kRecv) op.seq = recv_seq_[op.peer]++;
  else op.seq = coll_seq_++;
  CommRecord rec;
  rec.seq = op.seq, rec.op = op.name, rec.group = name_, rec.bytes = bytes, rec.peer = op.peer;
  rec.enqueue_ns = now_ns(), rec.status = "queued";
  const uint64_t id = TraceRing::get().open(std::move(rec));
  CommThread::get().post([this, op, state, id]() mutable { run_op(op, state, id); });
  return CommWork(state);
}

namespace {

void finish(uint64_t record, const std::string& status, bool ok, detail::WorkState& state) {
  TraceRing::get().update(record, [&](CommRecord& r) { r.end_ns = now_ns(), r.status = status; });
  state.finish(ok ? nullptr : std::make_exception_ptr(CommError(status)));
}

}  // namespace

void Communicator::run_op(Op& op, const std::shared_ptr<detail::WorkState>& state, uint64_t record) {
  const bool p2p = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
  if (!p2p) complete_posted();
  TraceRing::get().update(record, [](CommRecord& r) { r.start_ns = now_ns(), r.status = "running"; });
  op.deadline = std::chrono::steady_clock::now() + timeout_;
  std::string status = "ok";
  bool posted = false;
  const bool ok = run_step(op, [&] {
    if (p2p && post(op)) posted = true;
    else execute(op);
  }, status);
  if (ok && posted) {
    g_posted.push_back([this, op, state, record]() mutable {
      std::string st = "ok";
      const bool fine = run_step(op, [&] { complete(op); }, st);
      op.handle.reset();
      finish(record, st, fine, *state);
    });
    return;
  }
  finish(record, status, ok, *state);
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
    peer = fmt::format(" waiting on peer {} (world rank {})", op.waiting_on, world_ranks_[op.waiting_on]);
  status = fmt::format("{}:{}: {} on group '{}' ({}, seq {}, rank {} of {}) failed{}: {}", __FILE__, __LINE__, op.name,
                       name_, backend_name(), op.seq, rank_, size_, peer, what);
  broken_ = true;
  broken_what_ = status;
  return false;
}

// ---------------------------------------------------------------------------------------------
// The "self" backend: one process, every op is a copy (or nothing).

namespace {

class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator(std::string name, int world_rank, std::chrono::milliseconds timeout) {
    name_ = std::move(name);
    world_ranks_ = {world_rank};
    timeout_ = timeout;
  }
  ~SelfCommunicator() override { drain(); }

  std::unique_ptr<Communicator> new_group(const std::vector<int>& members, const std::string& name) override {
    MS_CHECK(members.size() == 1 && members[0] == 0, "new_group '{}' of group '{}' (size 1): members must be {{0}}",
             name, name_);
    return std::make_unique<SelfCommunicator>(name, world_ranks_[0], timeout_);
  }

 protected:
  const char* backend_name() const override { return "self"; }
  void execute(Op& op) override {
    const size_t n = op.count * dtype_size(op.dtype);
    if ((op.kind == OpKind::kReduceScatter || op.kind == OpKind::kAllGather) && n && op.in != op.out)
      std::memmove(op.out, op.in, n);
    MS_CHECK(op.kind != OpKind::kSend && op.kind != OpKind::kRecv, "{} needs a peer", op.name);
  }
};

}  // namespace

std::unique_ptr<Communicator> init_world(const CommEnv& env) {
  TraceRing::get().set_capacity(env.trace_capacity);
  MS_CHECK(env.timeout.count() > 0, "comm timeout must be positive, got {} ms", env.timeout.count());
  if (env.backend == "self") {
    MS_CHECK(env.world_size == 1 && env.rank == 0, "backend 'self' runs one process, but the world size is {} "
             "(rank {}): use gloo or mpi", env.world_size, env.rank);
    return std::make_unique<SelfCommunicator>("world", 0, env.timeout);
  }
  if (env.backend == "gloo") return make_gloo_world(env);
  if (env.backend == "mpi") return make_mpi_world(env);
  MS_FAIL("unknown comm backend '{}' (gloo, mpi or self)", env.backend);
}

}  // namespace ms
