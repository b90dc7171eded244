// communicator: the one interface every parallel component uses to talk to other ranks.
// A Communicator is a group of ranks on a real engine (Gloo over TCP, or MPI); it offers all-reduce,
// reduce-scatter, all-gather, broadcast, send/recv and barrier on fp32 and bf16 buffers, sum or max.
// Guarantees:
//  - Every op has a blocking form and an asynchronous form: start_<op>(...) returns a CommWork whose
//    wait() finishes it. Each communicator (the world and every sub-group) has its own progress: a
//    FIFO queue and a communication thread (comm_thread.h), like a CUDA stream per NCCL
//    communicator, so ops progress while the caller's compute threads work.
//  - Per group, priority = start order: the ops of one group run one at a time in the order they
//    were started (the same order on every member is the caller's duty, as with NCCL; callers start
//    communication in the order the computations that depend on it will run, MegaScale §3.2).
//  - Different groups are independent streams that progress concurrently: ranks may start ops of
//    two groups in different orders (rank 0: A then B, rank 1: B then A) without deadlocking.
//  - start_* may be called from any thread; one group may be used by several caller threads (its
//    order is then the order of their start_* calls).
//  - Every op has a deadline (comm_env.h: CommEnv::timeout). A stalled or dead peer ends in a CommError naming the
//    operation, the group, the sequence number and the peer (when the engine can tell), never a hang.
//    After a CommError the group is unusable: later ops on it fail at once (rebuild the world).
//    What a failure does to the process is a policy (comm_fatal.h): by default the CommError reaches
//    the waiter; the train app installs the fatal policy (hang dump, exit code 86, MPI_Abort under
//    MPI) so no caller unwinds past a buffer an engine still owns. Each running op's trace record
//    carries its deadline (deadline_ns), which the hang watchdog (obs/watchdog.h) scans; new_group
//    is a watched wait (MPI's group creation has no timeout of its own).
//  - Every op is recorded in the communication track of the trace sink (obs/trace_sink.h: op, group,
//    sequence number, bytes, peer, enqueue/start/end times, outcome) for hang analysis and timelines.
//  - Reductions sum in rank order 0..n-1 where the backend allows it, so every rank gets the same bits.
//  - Device buffers (StreamOrder below): an op on GPU memory starts after the device work it follows
//    (an event recorded on the producer's stream at start_*, never a host wait on the caller's
//    thread), and a consumer stream waits with CommWork::wait_on. Engines that move host memory
//    (Gloo, MPI, self) carry such an op through pinned host staging on the group's thread
//    (staging.h); NCCL (backends/nccl.h) runs it on the group's own stream.
// The world group comes from init_world (world.h); sub-groups from new_group(), called only by the
// group's members; RankGrid (rank_grid.h) is the only caller outside tests. Destroying a
// communicator waits for its ops, then joins its thread. Backends (self_backend.h,
// backends/gloo.h, backends/mpi.h) implement the protected interface below.
#pragma once
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"  // ms::Error
#include "base/clock.h"  // SteadyClock
#include "base/device.h" // Device, Stream
#include "base/dtype.h"  // DType

namespace ms {

// Element types of communication buffers: DType::kF32 and DType::kBF16 (bf16 buffers hold
// uint16_t, base/bf16.h; bf16 sums accumulate in fp32 per pairwise add and round to nearest even).
// Any other DType is an error at start_*.
enum class ReduceOp : uint8_t { kSum, kMax };
const char* reduce_op_name(ReduceOp op);

// Where an op's buffers live and which device work it follows.
//  - device kCpu (the default): host memory; the op may run as soon as it is started.
//  - device kCuda: every buffer of the op is device memory; the op runs only after the work
//    enqueued on `after` before start_* returned (an event recorded there). Waiting: wait() on the
//    host, or wait_on(stream) for a consumer stream.
struct StreamOrder {
  Device device = Device::kCpu;
  Stream after{};
};

class HostStaging;  // staging.h
class StagedCopy;   // staging.h

// A communication failure: timeout, dead peer, unreachable store. what() names op, group, seq, peer.
class CommError : public Error {
 public:
  using Error::Error;
};

namespace detail {
struct WorkState;
class CommThread;
}  // namespace detail

// Handle of an asynchronous op. wait() blocks until it is done and rethrows its CommError.
class CommWork {
 public:
  CommWork() = default;
  explicit CommWork(std::shared_ptr<detail::WorkState> s) : state_(std::move(s)) {}
  void wait();
  // Orders the work enqueued on stream s from now on after this op: for an op that an engine runs
  // on a device stream (NCCL), a stream wait on its completion event, blocking the host only until
  // the op is enqueued (a failure afterwards reaches a later wait() and the failure policy); for
  // every other op, wait().
  void wait_on(Stream s);
  bool done() const;
  bool valid() const { return state_ != nullptr; }

 private:
  std::shared_ptr<detail::WorkState> state_;
};

class Communicator {
 public:
  Communicator();
  virtual ~Communicator();  // joins this communicator's thread (backend destructors drain() first)
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }  // rank within this group
  int size() const { return size_; }
  const std::string& name() const { return name_; }  // "world", "dp[tp=0,pp=1]", ...
  // World rank of each member, indexed by group rank.
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  const char* backend() const { return backend_name(); }

  // In place on count elements.
  CommWork start_all_reduce(void* buf, size_t count, DType t, ReduceOp op, const StreamOrder& on = {});
  // in: size()*shard elements; out: shard elements, the reduction of in[rank()*shard, +shard) over
  // ranks. out may be in + rank()*shard (in place); otherwise it must not overlap in.
  CommWork start_reduce_scatter(const void* in, void* out, size_t shard, DType t, ReduceOp op,
                                const StreamOrder& on = {});
  // in: shard elements; out: size()*shard elements, rank r's shard at out + r*shard.
  // in may be out + rank()*shard (in place).
  CommWork start_all_gather(const void* in, void* out, size_t shard, DType t, const StreamOrder& on = {});
  CommWork start_broadcast(void* buf, size_t count, DType t, int root, const StreamOrder& on = {});
  // Point to point between group ranks; tags match a send to its recv. Both may be started before
  // either is waited on (a send/recv is posted without blocking the queue and completes when it is
  // waited on, independently of other posted ones, or before the next collective), so symmetric
  // exchanges do not deadlock. Zero bytes: no-op.
  CommWork start_send(const void* buf, size_t bytes, int peer, uint32_t tag, const StreamOrder& on = {});
  CommWork start_recv(void* buf, size_t bytes, int peer, uint32_t tag, const StreamOrder& on = {});
  CommWork start_barrier();

  // The blocking forms: start, then wait() on the host.
  void all_reduce(void* buf, size_t count, DType t, ReduceOp op, const StreamOrder& on = {}) {
    start_all_reduce(buf, count, t, op, on).wait();
  }
  void reduce_scatter(const void* in, void* out, size_t shard, DType t, ReduceOp op, const StreamOrder& on = {}) {
    start_reduce_scatter(in, out, shard, t, op, on).wait();
  }
  void all_gather(const void* in, void* out, size_t shard, DType t, const StreamOrder& on = {}) {
    start_all_gather(in, out, shard, t, on).wait();
  }
  void broadcast(void* buf, size_t count, DType t, int root, const StreamOrder& on = {}) {
    start_broadcast(buf, count, t, root, on).wait();
  }
  void send(const void* buf, size_t bytes, int peer, uint32_t tag, const StreamOrder& on = {}) {
    start_send(buf, bytes, peer, tag, on).wait();
  }
  void recv(void* buf, size_t bytes, int peer, uint32_t tag, const StreamOrder& on = {}) {
    start_recv(buf, bytes, peer, tag, on).wait();
  }
  void barrier() { start_barrier().wait(); }

  // A sub-group of this communicator: members are ranks of this group, in the new group's rank
  // order. Called by every member and only by members; groups are created in the same order on
  // every rank. No global barrier. The creation is a collective over this group: it runs on this
  // group's thread, after the ops started before it. The new group has its own thread.
  // The new group inherits this group's rank labels and stage_host_buffers setting.
  std::unique_ptr<Communicator> new_group(const std::vector<int>& members, const std::string& name);
  // A partition of this group into sub-groups: every rank of this group calls it at the same point
  // (a collective over this group), each with the members of ITS new group. Engines that split
  // communicators (NCCL: ncclCommSplit) do it in one collective without a store round trip; the
  // others create the group as new_group does.
  std::unique_ptr<Communicator> split(const std::vector<int>& members, const std::string& name);

  // Tests: host buffers take the staging path of device buffers (host memory standing in for device
  // memory), so a machine without a GPU exercises it. Set before the first op and before making
  // groups (they inherit it); engines that run on device streams ignore it.
  void stage_host_buffers(bool on) { stage_host_ = on; }
  // True for an engine that runs ops on device buffers itself (NCCL): no host staging.
  virtual bool device_native() const { return false; }

  // Labels of world ranks for error messages and dumps (index: world rank; e.g. "tp=0,dp=1,pp=0"), set
  // on the world by RankGrid before it creates the groups; groups created afterwards share them. Without
  // labels a peer is named by its world rank only. Set before ops are started.
  void set_rank_labels(std::shared_ptr<const std::vector<std::string>> labels) { rank_labels_ = std::move(labels); }
  // "world rank W (label)" or "world rank W".
  std::string describe_world_rank(int world_rank) const;

 protected:
  // new_group's backend part: creates the group (its identity set through set_identity).
  virtual std::unique_ptr<Communicator> make_group(const std::vector<int>& members, const std::string& name) = 0;
  // split's backend part; by default make_group.
  virtual std::unique_ptr<Communicator> make_split(const std::vector<int>& members, const std::string& name) {
    return make_group(members, name);
  }
  virtual const char* backend_name() const = 0;
  // ---- Backend interface. communicator.cpp owns the queue, the sequence numbers and the trace; a backend
  // only runs ops, one at a time, on this communicator's thread, in start order. Ops of other
  // communicators (of the same backend) run on their own threads at the same time: what a backend
  // shares between communicators must be safe for that.
  enum class OpKind : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSend, kRecv, kBarrier };
  struct Op {
    OpKind kind = OpKind::kBarrier;
    const char* name = "";     // "all_reduce", ...
    uint64_t seq = 0;          // collectives: per-group counter; send/recv: per (peer, direction) counter
    const void* in = nullptr;  // reduce_scatter / all_gather / send source
    void* out = nullptr;       // all_reduce / broadcast buffer; reduce_scatter / all_gather / recv target
    size_t count = 0;          // elements (all_reduce, broadcast), shard elements (reduce_scatter,
                               // all_gather), bytes (send, recv)
    DType dtype = DType::kF32;
    ReduceOp reduce = ReduceOp::kSum;
    int peer = -1;             // send/recv peer, broadcast root (group ranks)
    uint32_t tag = 0;
    SteadyClock::time_point deadline;  // start on this communicator's thread + timeout_
    int waiting_on = -1;       // set by the backend while it waits on one peer (group rank)
    std::shared_ptr<void> handle;  // backend state between post() and complete()
    Device device = Device::kCpu;  // where in/out live (StreamOrder)
    // The event the op follows (a cudaEvent_t recorded on StreamOrder::after), or null. A
    // device_native() backend waits on it itself; for the others it has completed before execute().
    std::shared_ptr<void> after;
    std::shared_ptr<StagedCopy> staged;    // the host copies of a staged op (communicator.cpp)
    detail::WorkState* work = nullptr;            // for op_enqueued
  };
  // Runs op to completion or throws (any exception; communicator.cpp turns it into a CommError naming the
  // op, group, seq and op.waiting_on, and marks this communicator unusable).
  virtual void execute(Op& op) = 0;
  // Two-phase send/recv: post() starts op without blocking and returns true; complete() finishes
  // it later: when the caller waits on that op (it alone, so ops may complete in any order), or, all
  // of them in post order, before the next op that is not a posted send/recv runs; so a rank can
  // start a send and a recv to the same peer (in either order) and wait afterwards, and a wait on a
  // receive never waits on an unrelated send. Default: not supported (execute() does it all).
  virtual bool post(Op& op) { return false; }
  virtual void complete(Op& op) {}
  // A device_native() backend, once op's device work is enqueued: `done` (an event, a cudaEvent_t
  // handle owned by the pointer) completes with it; CommWork::wait_on waits on it from then on.
  static void op_enqueued(Op& op, std::shared_ptr<void> done);
  // A backend constructor's bookkeeping: name, rank in the group, members' world ranks, deadline.
  void set_identity(std::string name, int rank, std::vector<int> world_ranks, std::chrono::milliseconds timeout);
  // new_group's argument check, shared by the backends: members must be distinct ranks of this
  // group and include the caller. Returns the caller's rank in the new group; fills world ranks.
  int check_group_members(const std::vector<int>& members, const std::string& name,
                          std::vector<int>& world_ranks) const;
  // The frame of a backend's make_group / make_split: checks the members, then runs make(the
  // caller's rank in the new group, the members' world ranks) on this group's thread, after the
  // ops queued before, unless this group is broken; returns what make built.
  using MakeChild = std::function<std::unique_ptr<Communicator>(int rank, const std::vector<int>& world_ranks)>;
  std::unique_ptr<Communicator> make_child(const std::vector<int>& members, const std::string& name,
                                           const MakeChild& make);
  // Runs fn on THIS communicator's thread, after every op queued on it before (posted send/recv
  // completed first), and waits; rethrows what fn threw. Inline when already on that thread.
  void run_on_comm_thread(const std::function<void()>& fn);
  // Waits until every op started on this communicator has finished (posted send/recv included).
  // Backend destructors call it first; afterwards no op of this communicator runs or is queued, so
  // the destructor may release backend state on the caller's thread. No thread is started for it.
  void drain();
  // Throws the CommError that made this communicator unusable, if any (call on its thread).
  void throw_if_broken() const;
  bool broken() const { return broken_; }  // on this communicator's thread only

  int rank_ = 0, size_ = 1;
  std::string name_ = "world";
  std::vector<int> world_ranks_{0};
  std::chrono::milliseconds timeout_{300000};  // deadline of each op
  std::shared_ptr<const std::vector<std::string>> rank_labels_;  // set_rank_labels
  bool stage_host_ = false;  // stage_host_buffers

 private:
  void check_point_to_point(const char* op, const void* buf, size_t bytes, int peer) const;
  CommWork submit(Op op, size_t bytes, const StreamOrder& on);
  // A staged op (host engine, device buffers): its reads copied to host memory, in/out redirected.
  void stage_in(Op& op);
  std::unique_ptr<HostStaging> staging_;  // created on the first staged op, on this group's thread
  void run_op(Op& op, const std::shared_ptr<detail::WorkState>& state, uint64_t record);
  // Runs one step of op (body) on this communicator's thread. On failure sets status to a message
  // naming op, group, seq and peer, marks the communicator unusable and returns false.
  bool run_step(Op& op, const std::function<void()>& body, std::string& status);
  std::mutex submit_mu_;  // seq assignment and enqueue are one step, so queue order = seq order
  std::array<std::string_view, 7> op_segs_{};  // comm_segment of each OpKind on this group (under submit_mu_)
  uint64_t coll_seq_ = 0;
  std::vector<uint64_t> send_seq_, recv_seq_;  // per peer
  bool broken_ = false;    // this communicator's thread only
  std::string broken_what_;
  std::unique_ptr<detail::CommThread> thread_;  // this communicator's queue and thread (started lazily)
};

}  // namespace ms
