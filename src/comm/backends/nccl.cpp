// nccl.cpp: see nccl.h.
#include "comm/backends/nccl.h"

#include <nccl.h>

#include <algorithm>  // std::min
#include <chrono>
#include <cstring>  // std::memcpy
#include <map>
#include <string>
#include <thread>   // std::this_thread::sleep_for

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "base/cuda_check.h"     // MS_CUDA_CHECK, cudaStream_t
#include "comm/backends/gloo.h"  // store_share

#define MS_NCCL_FAIL(...) \
  throw ::ms::CommError(::fmt::format("{}:{}: {}", __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)))

namespace ms {

namespace {

using std::chrono::milliseconds;

// A non-blocking NCCL call: ncclSuccess or ncclInProgress (settled later by settle()).
#define MS_NCCL_CALL(call)                                                                                   \
  do {                                                                                                       \
    const ncclResult_t ms_nccl_r_ = (call);                                                                  \
    if (ms_nccl_r_ != ncclSuccess && ms_nccl_r_ != ncclInProgress)                                           \
      MS_NCCL_FAIL("{} failed: {} ({})", #call, ncclGetErrorString(ms_nccl_r_), ncclGetLastError(nullptr)); \
  } while (0)

ncclDataType_t nccl_type(DType t) { return t == DType::kBF16 ? ncclBfloat16 : ncclFloat32; }
ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::kSum ? ncclSum : ncclMax; }
cudaStream_t cs(Stream s) { return static_cast<cudaStream_t>(s.handle); }

// Until comm's last non-blocking call has taken effect (ncclInProgress no more), or the deadline:
// then abort and throw `what` with the reason.
void settle(ncclComm_t comm, SteadyClock::time_point deadline, const std::string& what) {
  for (;;) {
    ncclResult_t st = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &st);
    if (r != ncclSuccess) MS_NCCL_FAIL("{}: ncclCommGetAsyncError failed: {}", what, ncclGetErrorString(r));
    if (st == ncclSuccess) return;
    if (st != ncclInProgress) {
      ncclCommAbort(comm);
      MS_NCCL_FAIL("{}: NCCL error {} ({})", what, ncclGetErrorString(st), ncclGetLastError(comm));
    }
    if (SteadyClock::now() > deadline) {
      ncclCommAbort(comm);
      MS_NCCL_FAIL("{}: not done by its deadline (communicator aborted)", what);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// The root's fresh unique id, shared with the other members through the rendezvous store under
// `key` (a group of one needs no store).
ncclUniqueId share_unique_id(const CommEnv& env, const std::string& key, bool root, size_t members) {
  ncclUniqueId uid{};
  if (root) MS_NCCL_CALL(ncclGetUniqueId(&uid));
  if (members <= 1) return uid;
  const char* p = reinterpret_cast<const char*>(&uid);
  const std::vector<char> got = store_share(env, key, std::vector<char>(p, p + sizeof uid), root);
  MS_CHECK(got.size() == sizeof uid, "nccl: the store holds a unique id of {} bytes under '{}', not {}", got.size(), key,
           sizeof uid);
  std::memcpy(&uid, got.data(), sizeof uid);
  return uid;
}

ncclConfig_t nonblocking_config() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  return c;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const CommEnv& env, ncclComm_t comm, std::string name, int rank, std::vector<int> world_ranks,
                   milliseconds timeout)
      : env_(env), comm_(comm) {
    set_identity(std::move(name), rank, std::move(world_ranks), timeout);
    stream_ = stream_create(), send_stream_ = stream_create(), recv_stream_ = stream_create();
    scratch_ = static_cast<char*>(device_malloc(kScratchMin));
    scratch_bytes_ = kScratchMin;
  }

  ~NcclCommunicator() override {
    drain();
    if (comm_ && !aborted_) {
      // A non-blocking communicator is finalized (its work flushed, bounded by the deadline), then
      // destroyed; a broken group, or one that does not finalize in time, is aborted instead.
      bool clean = !broken();
      if (clean) {
        const ncclResult_t f = ncclCommFinalize(comm_);
        clean = f == ncclSuccess || f == ncclInProgress;
      }
      const auto deadline = SteadyClock::now() + timeout_;
      while (clean) {
        ncclResult_t st = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &st) != ncclSuccess || (st != ncclSuccess && st != ncclInProgress) ||
            SteadyClock::now() > deadline) {
          clean = false;
          break;
        }
        if (st == ncclSuccess) break;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (clean) ncclCommDestroy(comm_);
      else ncclCommAbort(comm_);
    }
    device_free(scratch_);
    for (Stream s : {stream_, send_stream_, recv_stream_}) stream_destroy(s);
  }

  bool device_native() const override { return true; }

  static std::unique_ptr<Communicator> create_world(const CommEnv& env);

 protected:
  const char* backend_name() const override { return "nccl"; }

  std::unique_ptr<Communicator> make_group(const std::vector<int>& members, const std::string& name) override {
    return make_child(members, name, [&](int me, const std::vector<int>& wr) {
      // A fresh unique id through the store, under a key naming the group and its members.
      const std::string id = fmt::format("nccl/{}/{}/{}", name_, name, fmt::join(wr, ","));
      const int k = children_[id]++;
      const ncclUniqueId uid = share_unique_id(env_, fmt::format("{}#{}", id, k), me == 0, members.size());
      return init(env_, uid, name, me, wr, timeout_);
    });
  }

  std::unique_ptr<Communicator> make_split(const std::vector<int>& members, const std::string& name) override {
    return make_child(members, name, [&](int me, const std::vector<int>& wr) -> std::unique_ptr<Communicator> {
      // Color: the group's lowest world rank (the groups partition this one); key: rank in it.
      ncclConfig_t config = nonblocking_config();
      ncclComm_t c = nullptr;
      MS_NCCL_CALL(ncclCommSplit(comm_, *std::min_element(wr.begin(), wr.end()), me, &c, &config));
      const std::string what = fmt::format("split of group '{}' into '{}' (rank {} of {})", name_, name, me,
                                           members.size());
      settle(comm_, SteadyClock::now() + timeout_, what);
      if (c) settle(c, SteadyClock::now() + timeout_, what);
      return std::make_unique<NcclCommunicator>(env_, c, name, me, wr, timeout_);
    });
  }

  void execute(Op& op) override {
    const std::string what = describe(op);
    if (op.after) MS_CUDA_CHECK(cudaStreamWaitEvent(cs(stream_), static_cast<cudaEvent_t>(op.after.get()), 0));
    const size_t es = dtype_size(op.dtype), n = op.count * es, all = n * static_cast<size_t>(size_);
    const void* in = op.in;
    void* out = op.out;
    // Host buffers: through the scratch (in at 0, out after it; in place stays in place).
    const bool host = op.device == Device::kCpu && op.kind != OpKind::kBarrier;
    size_t in_bytes = 0, out_bytes = 0;
    if (host) {
      switch (op.kind) {
        case OpKind::kAllReduce:
        case OpKind::kBroadcast: in_bytes = 0, out_bytes = n; break;
        case OpKind::kReduceScatter: in_bytes = all, out_bytes = n; break;
        case OpKind::kAllGather: in_bytes = n, out_bytes = all; break;
        default: break;
      }
      grow_scratch(in_bytes + out_bytes);
      char* din = scratch_;
      char* dout = scratch_ + in_bytes;
      if (in_bytes) MS_CUDA_CHECK(cudaMemcpyAsync(din, in, in_bytes, cudaMemcpyHostToDevice, cs(stream_)));
      if (op.kind == OpKind::kAllReduce || op.kind == OpKind::kBroadcast)
        MS_CUDA_CHECK(cudaMemcpyAsync(dout, out, out_bytes, cudaMemcpyHostToDevice, cs(stream_)));
      in = in_bytes ? din : dout;
      out = dout;
    }
    const ncclDataType_t t = nccl_type(op.dtype);
    switch (op.kind) {
      case OpKind::kAllReduce:
        MS_NCCL_CALL(ncclAllReduce(out, out, op.count, t, nccl_op(op.reduce), comm_, cs(stream_)));
        break;
      case OpKind::kReduceScatter:
        MS_NCCL_CALL(ncclReduceScatter(in, out, op.count, t, nccl_op(op.reduce), comm_, cs(stream_)));
        break;
      case OpKind::kAllGather:
        MS_NCCL_CALL(ncclAllGather(in, out, op.count, t, comm_, cs(stream_)));
        break;
      case OpKind::kBroadcast:
        MS_NCCL_CALL(ncclBroadcast(out, out, op.count, t, op.peer, comm_, cs(stream_)));
        break;
      case OpKind::kBarrier:
        grow_scratch(sizeof(float));
        MS_NCCL_CALL(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, cs(stream_)));
        break;
      case OpKind::kSend:
      case OpKind::kRecv:
        return;  // zero bytes (post() takes the others)
    }
    settle_or_abort(op, what);
    if (host && out_bytes) MS_CUDA_CHECK(cudaMemcpyAsync(op.out, out, out_bytes, cudaMemcpyDeviceToHost, cs(stream_)));
    const std::shared_ptr<void> done = record_shared_event(stream_);
    if (!host) op_enqueued(op, done);
    poll(op, done, what);
  }

  bool post(Op& op) override {
    if ((op.kind != OpKind::kSend && op.kind != OpKind::kRecv) || op.count == 0) return false;
    const bool send = op.kind == OpKind::kSend;
    const Stream s = send ? send_stream_ : recv_stream_;
    if (op.after) MS_CUDA_CHECK(cudaStreamWaitEvent(cs(s), static_cast<cudaEvent_t>(op.after.get()), 0));
    auto p = std::make_shared<Posted>();
    void* buf = send ? const_cast<void*>(op.in) : op.out;
    if (op.device == Device::kCpu) {  // host bytes: a device copy of the op's own
      p->dev = DeviceBuffer<char>(op.count);
      if (send) MS_CUDA_CHECK(cudaMemcpyAsync(p->dev.data(), buf, op.count, cudaMemcpyHostToDevice, cs(s)));
      buf = p->dev.data();
    }
    if (send) MS_NCCL_CALL(ncclSend(buf, op.count, ncclUint8, op.peer, comm_, cs(s)));
    else MS_NCCL_CALL(ncclRecv(buf, op.count, ncclUint8, op.peer, comm_, cs(s)));
    op.waiting_on = op.peer;
    settle_or_abort(op, describe(op));
    if (op.device == Device::kCpu && !send)
      MS_CUDA_CHECK(cudaMemcpyAsync(op.out, p->dev.data(), op.count, cudaMemcpyDeviceToHost, cs(s)));
    p->done = record_shared_event(s);
    if (op.device != Device::kCpu) op_enqueued(op, p->done);
    op.handle = std::move(p);
    return true;
  }

  void complete(Op& op) override {
    auto* p = static_cast<Posted*>(op.handle.get());
    op.waiting_on = op.peer;
    poll(op, p->done, describe(op));
  }

 private:
  static constexpr size_t kScratchMin = 256;
  struct Posted {
    DeviceBuffer<char> dev;
    std::shared_ptr<void> done;
  };

  static std::unique_ptr<Communicator> init(const CommEnv& env, const ncclUniqueId& uid, const std::string& name,
                                            int rank, std::vector<int> world_ranks, milliseconds timeout) {
    ncclConfig_t config = nonblocking_config();
    ncclComm_t c = nullptr;
    const int n = static_cast<int>(world_ranks.size());
    MS_NCCL_CALL(ncclCommInitRankConfig(&c, n, uid, rank, &config));
    settle(c, SteadyClock::now() + timeout,
           fmt::format("ncclCommInitRankConfig of group '{}' (rank {} of {})", name, rank, n));
    return std::make_unique<NcclCommunicator>(env, c, name, rank, std::move(world_ranks), timeout);
  }

  std::string describe(const Op& op) const {
    return fmt::format("{} on group '{}' (nccl, seq {}, rank {} of {})", op.name, name_, op.seq, rank_, size_);
  }

  void grow_scratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return;
    MS_CUDA_CHECK(cudaStreamSynchronize(cs(stream_)));  // the old scratch may still be in use
    device_free(scratch_);
    scratch_ = static_cast<char*>(device_malloc(bytes));
    scratch_bytes_ = bytes;
  }

  void abort() {
    if (aborted_) return;
    aborted_ = true;
    ncclCommAbort(comm_);
  }

  void settle_or_abort(Op& op, const std::string& what) {
    try {
      settle(comm_, op.deadline, what);
    } catch (...) {
      aborted_ = true;  // settle aborted the communicator
      throw;
    }
  }

  // Until `done` completes; NCCL's asynchronous errors and the op's deadline end it in a CommError
  // (the communicator aborted).
  void poll(Op& op, const std::shared_ptr<void>& done, const std::string& what) {
    const Event e{done.get()};
    for (int spins = 0;; spins++) {
      if (event_query(e)) return;
      ncclResult_t st = ncclSuccess;
      ncclCommGetAsyncError(comm_, &st);
      if (st != ncclSuccess && st != ncclInProgress) {
        abort();
        MS_NCCL_FAIL("{}: NCCL error {} ({})", what, ncclGetErrorString(st), ncclGetLastError(comm_));
      }
      if (SteadyClock::now() > op.deadline) {
        abort();
        MS_NCCL_FAIL("{}: not complete by its deadline ({} ms): communicator aborted", what, timeout_.count());
      }
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(spins > 10000 ? 200 : 20));
    }
  }

  CommEnv env_;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  Stream stream_{}, send_stream_{}, recv_stream_{};
  char* scratch_ = nullptr;  // host ops' device copies
  size_t scratch_bytes_ = 0;
  std::map<std::string, int> children_;  // new_group keys issued so far
};

std::unique_ptr<Communicator> NcclCommunicator::create_world(const CommEnv& env) {
  MS_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, "nccl: rank {} of world size {}",
           env.rank, env.world_size);
  require_device(Device::kCuda);
  const ncclUniqueId uid = share_unique_id(env, "nccl/world", env.rank == 0, static_cast<size_t>(env.world_size));
  std::vector<int> world(env.world_size);
  for (int r = 0; r < env.world_size; r++) world[r] = r;
  return init(env, uid, "world", env.rank, std::move(world), env.timeout);
}

}  // namespace

std::unique_ptr<Communicator> make_nccl_world(const CommEnv& env) { return NcclCommunicator::create_world(env); }

}  // namespace ms
