// backends/mpi.cpp: the MPI backend (see mpi.h for what it guarantees).
#define OMPI_SKIP_MPICXX 1  // C API only
#define MPICH_SKIP_MPICXX 1
#include "comm/backends/mpi.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>  // INT_MAX
#include <cstdlib>  // atexit
#include <cstring>  // memcpy
#include <mutex>
#include <thread>

#include "base/bf16.h"
#include "base/clock.h"         // SteadyClock
#include "comm/comm_fatal.h"   // comm_failure_fatal, set_process_abort, comm_timeout
#include "comm/comm_thread.h"  // stop_all_comm_threads
#include "obs/watchdog.h"       // WatchedWait

namespace ms {
namespace {

using Clock = SteadyClock;
using std::chrono::milliseconds;

// State of MPI in this process, read by the threads of every MPI communicator at once.
// g_failed: some op failed (a peer may be stalled), so MPI_Finalize, which waits for every rank, is
// skipped at exit. g_initialized_here / g_finalized: MPI_Init_thread / MPI_Finalize ran here.
// g_tag_ub and the bf16 ops are written once, by init_mpi, before any communicator exists (so
// before any comm thread starts), and freed at exit after every comm thread has been joined.
std::atomic<bool> g_failed{false};
std::atomic<bool> g_initialized_here{false}, g_finalized{false};
std::atomic<int> g_tag_ub{32767};
MPI_Op g_bf16_sum = MPI_OP_NULL, g_bf16_max = MPI_OP_NULL;
std::mutex g_init_mu;  // init_mpi and finalize_at_exit

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}

std::string mpi_error_text(int code) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(code, s, &n) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(s, n);
}

#define MS_MPI(call)                                                                                    \
  do {                                                                                                  \
    const int ms_rc_ = (call);                                                                          \
    if (ms_rc_ != MPI_SUCCESS)                                                                          \
      throw ::ms::CommError(::fmt::format("{}:{}: {} failed: {}", __FILE__, __LINE__, #call, mpi_error_text(ms_rc_))); \
  } while (0)

// bf16 reductions as MPI user ops: inout[i] = in[i] (op) inout[i], fp32 arithmetic, RNE rounding.
// OpenMPI runs them inside its progress engine, on whichever thread drives it (with
// MPI_THREAD_MULTIPLE possibly another communicator's thread), and hands the buffers to and from
// that thread through its own atomics, which ThreadSanitizer cannot see. Like MPI's built-in
// reductions (fp32 MPI_SUM runs inside libmpi), they are therefore not instrumented; they touch
// nothing but the two buffers MPI passes them.
#define MS_RUN_BY_MPI_ENGINE __attribute__((no_sanitize("thread")))
MS_RUN_BY_MPI_ENGINE void bf16_sum_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16_t* a = static_cast<const bf16_t*>(in);
  bf16_t* b = static_cast<bf16_t*>(inout);
  for (int i = 0; i < *len; i++) b[i] = f32_to_bf16_rne(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}
MS_RUN_BY_MPI_ENGINE void bf16_max_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16_t* a = static_cast<const bf16_t*>(in);
  bf16_t* b = static_cast<bf16_t*>(inout);
  for (int i = 0; i < *len; i++)
    if (bf16_to_f32(a[i]) > bf16_to_f32(b[i])) b[i] = a[i];
}

MPI_Datatype mpi_type(DType t) { return t == DType::kF32 ? MPI_FLOAT : MPI_UINT16_T; }
MPI_Op mpi_op(DType t, ReduceOp op) {
  if (t == DType::kF32) return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX;
  return op == ReduceOp::kSum ? g_bf16_sum : g_bf16_max;
}

int as_int(size_t n, const char* what) {
  MS_CHECK(n <= static_cast<size_t>(INT_MAX), "{}: count {} does not fit MPI's int", what, n);
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, bool owned, std::string name, int rank, std::vector<int> world_ranks,
                  milliseconds timeout)
      : comm_(comm), owned_(owned) {
    set_identity(std::move(name), rank, std::move(world_ranks), timeout);
  }

  ~MpiCommunicator() override {
    drain();  // afterwards no op of this communicator runs: comm_ is the caller's (THREAD_MULTIPLE)
    if (owned_ && !g_finalized && !g_failed && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  static std::unique_ptr<Communicator> create_world(const CommEnv& env);

  std::unique_ptr<Communicator> make_group(const std::vector<int>& members, const std::string& name) override {
    return make_child(members, name, [&](int me, const std::vector<int>& wr) {
      MPI_Group parent = MPI_GROUP_NULL, sub = MPI_GROUP_NULL;
      MS_MPI(MPI_Comm_group(comm_, &parent));
      MS_MPI(MPI_Group_incl(parent, static_cast<int>(members.size()), members.data(), &sub));
      MPI_Comm nc = MPI_COMM_NULL;
      // Collective over the members only; one tag is enough because creations from one parent are
      // serialised on the parent's thread and happen in the same order on every member (the tag
      // lives in the parent's context, so creations from other parents do not mix with these).
      const int rc = MPI_Comm_create_group(comm_, sub, 7471, &nc);
      MPI_Group_free(&sub);
      MPI_Group_free(&parent);
      if (rc != MPI_SUCCESS)
        throw CommError(fmt::format("{}:{}: new_group '{}' of group '{}': MPI_Comm_create_group failed: {}", __FILE__,
                                    __LINE__, name, name_, mpi_error_text(rc)));
      MS_MPI(MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN));
      int r = -1;
      MS_MPI(MPI_Comm_rank(nc, &r));
      MS_CHECK(r == me, "new_group '{}': MPI rank {} != member index {}", name, r,
               me);
      return std::make_unique<MpiCommunicator>(nc, true, name, r, wr, timeout_);
    });
  }

 protected:
  const char* backend_name() const override { return "mpi"; }

  void execute(Op& op) override {
    try {
      run(op);
    } catch (...) {
      g_failed = true;
      throw;
    }
  }

  // Send/recv are posted (MPI_Isend/MPI_Irecv) and completed later, see Communicator::post.
  bool post(Op& op) override {
    // Zero bytes: nothing to move, as on gloo (not a synchronisation point).
    if ((op.kind != OpKind::kSend && op.kind != OpKind::kRecv) || op.count == 0) return false;
    try {
      const int tag_ub = g_tag_ub;
      MS_CHECK(op.tag <= static_cast<uint32_t>(tag_ub), "{}: tag {} above MPI_TAG_UB {}", op.name, op.tag, tag_ub);
      const int n = as_int(op.count, op.name);
      op.waiting_on = op.peer;
      auto req = std::make_shared<MPI_Request>(MPI_REQUEST_NULL);
      if (op.kind == OpKind::kSend)
        MS_MPI(MPI_Isend(op.in, n, MPI_BYTE, op.peer, static_cast<int>(op.tag), comm_, req.get()));
      else
        MS_MPI(MPI_Irecv(op.out, n, MPI_BYTE, op.peer, static_cast<int>(op.tag), comm_, req.get()));
      op.handle = std::move(req);
    } catch (...) {
      g_failed = true;
      throw;
    }
    return true;
  }

  void complete(Op& op) override {
    try {
      op.waiting_on = op.peer;
      poll(*static_cast<MPI_Request*>(op.handle.get()), op);
    } catch (...) {
      g_failed = true;
      throw;
    }
  }

 private:
  void run(Op& op) {
    const MPI_Datatype T = mpi_type(op.dtype);
    const size_t es = dtype_size(op.dtype);
    MPI_Request req = MPI_REQUEST_NULL;
    switch (op.kind) {
      case OpKind::kAllReduce:
        MS_MPI(MPI_Iallreduce(MPI_IN_PLACE, op.out, as_int(op.count, op.name), T, mpi_op(op.dtype, op.reduce), comm_,
                              &req));
        poll(req, op);
        break;
      case OpKind::kReduceScatter: {
        const int n = as_int(op.count, op.name);
        as_int(op.count * size_, op.name);
        const bool in_place = op.out == static_cast<const char*>(op.in) + rank_ * op.count * es;
        // MPI_IN_PLACE would leave the result at the start of the buffer and clobber it: use a copy.
        if (in_place && tmp_.size() < op.count * es) tmp_.resize(op.count * es);
        void* dst = in_place ? tmp_.data() : op.out;
        MS_MPI(MPI_Ireduce_scatter_block(op.in, dst, n, T, mpi_op(op.dtype, op.reduce), comm_, &req));
        poll(req, op);
        if (in_place && op.count) std::memcpy(op.out, dst, op.count * es);
        break;
      }
      case OpKind::kAllGather: {
        const int n = as_int(op.count, op.name);
        as_int(op.count * size_, op.name);
        const bool in_place = op.in == static_cast<char*>(op.out) + rank_ * op.count * es;
        MS_MPI(MPI_Iallgather(in_place ? MPI_IN_PLACE : op.in, n, T, op.out, n, T, comm_, &req));
        poll(req, op);
        break;
      }
      case OpKind::kBroadcast:
        MS_MPI(MPI_Ibcast(op.out, as_int(op.count, op.name), T, op.peer, comm_, &req));
        poll(req, op);
        break;
      case OpKind::kSend:
      case OpKind::kRecv:
        break;  // post() and complete()
      case OpKind::kBarrier:
        MS_MPI(MPI_Ibarrier(comm_, &req));
        poll(req, op);
        break;
    }
  }

  // MPI_Test until done or the deadline. Spins briefly, then sleeps with a growing pause (at most
  // 200 us), so a waiting comm thread leaves the cores to the compute threads.
  void poll(MPI_Request& req, Op& op) {
    int flag = 0;
    int idle = 0;
    for (;;) {
      MS_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
      if (flag) return;
      if (Clock::now() >= op.deadline) {
        // Under the default (throw) policy the caller may free the buffer once this returns: a
        // send/recv is cancelled first (bounded); a collective cannot be (comm_fatal.h). The fatal
        // policy never returns to the caller.
        if ((op.kind == OpKind::kSend || op.kind == OpKind::kRecv) && !comm_failure_fatal()) cancel(req);
        throw std::runtime_error(fmt::format("timed out after {} ms{}", timeout_.count(),
                                             op.waiting_on < 0 ? " (MPI cannot tell which rank is missing)" : ""));
      }
      if (++idle < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(std::min(200, (idle - 63) * 2)));
    }
  }

  // MPI_Cancel of a pending send/recv, then MPI_Test until it is done, at most 1 s.
  static void cancel(MPI_Request& req) {
    if (req == MPI_REQUEST_NULL || MPI_Cancel(&req) != MPI_SUCCESS) return;
    const auto until = Clock::now() + std::chrono::seconds(1);
    int flag = 0;
    while (Clock::now() < until && MPI_Test(&req, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && !flag)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }

  // atexit: joins every comm thread (their queued ops finish first), then finalises MPI on the
  // exiting thread, unless an op failed.
  static void finalize_at_exit() {
    if (g_failed) return;  // a stalled peer would block MPI_Finalize forever; mpirun ends the job
    // Joining and finalising wait on peers: bounded by the hang watchdog when it runs (obs/watchdog.h).
    WatchedWait watched("MPI_Finalize", "world", 2 * detail::comm_timeout());
    detail::stop_all_comm_threads();
    if (g_failed) return;  // an op that was still queued failed
    std::lock_guard lk(g_init_mu);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
      if (g_bf16_sum != MPI_OP_NULL) MPI_Op_free(&g_bf16_sum);
      if (g_bf16_max != MPI_OP_NULL) MPI_Op_free(&g_bf16_max);
      detail::set_process_abort(nullptr);
      MPI_Finalize();
    }
    g_finalized = true;
  }

  static void init_mpi(milliseconds timeout);

  MPI_Comm comm_;
  bool owned_;
  std::vector<char> tmp_;  // in-place reduce-scatter result: per communicator, its thread only
};

// On the caller's thread, before any MPI communicator (and so any of their threads) exists.
void MpiCommunicator::init_mpi(milliseconds timeout) {
  std::lock_guard lk(g_init_mu);
  MS_CHECK(!g_finalized, "MPI was already finalised in this process");
  int init = 0;
  MS_MPI(MPI_Initialized(&init));
  if (!init) {
    // Each communicator drives MPI from its own thread, several at the same time.
    int provided = MPI_THREAD_SINGLE;
    {
      WatchedWait watched("MPI_Init_thread", "world", timeout);  // waits for every rank, without a timeout
      MS_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      MPI_Finalize();  // every rank gets the same level, so every rank stops here
      g_finalized = true;
      throw CommError(fmt::format("{}:{}: the MPI library provides only {} ({}); megascale drives each communicator "
                                  "from its own thread and needs MPI_THREAD_MULTIPLE (build OpenMPI with thread "
                                  "support)", __FILE__, __LINE__, thread_level_name(provided), provided));
    }
    g_initialized_here = true;
    // end_process_now (comm_fatal.h): MPI_Abort, so mpirun ends the job without MPI_Finalize.
    detail::set_process_abort([](int code) { MPI_Abort(MPI_COMM_WORLD, code); });
    std::atexit(&MpiCommunicator::finalize_at_exit);
    MS_MPI(MPI_Op_create(&bf16_sum_fn, 1, &g_bf16_sum));
    MS_MPI(MPI_Op_create(&bf16_max_fn, 1, &g_bf16_max));
    void* ub = nullptr;
    int flag = 0;
    MS_MPI(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    if (flag && ub) g_tag_ub = *static_cast<int*>(ub);
  }
  MS_CHECK(g_initialized_here, "MPI was initialised outside megascale; init_world must initialise it");
  MS_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
}

std::unique_ptr<Communicator> MpiCommunicator::create_world(const CommEnv& env) {
  int rank = -1, size = 0;
  init_mpi(env.timeout);
  MS_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MS_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  MS_CHECK(env.world_size == 0 || (env.world_size == size && env.rank == rank),
           "MPI reports rank {} of {}, the environment says rank {} of {}", rank, size, env.rank, env.world_size);
  std::vector<int> world(size);
  for (int r = 0; r < size; r++) world[r] = r;
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false, "world", rank, world, env.timeout);
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_world(const CommEnv& env) { return MpiCommunicator::create_world(env); }

}  // namespace ms
