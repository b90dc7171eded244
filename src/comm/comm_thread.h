// comm_thread: the progress of one communicator (internal to comm/): a FIFO queue and the thread
// that runs it, like a CUDA stream per NCCL communicator, plus the completion state of an op.
// Guarantees:
//  - Every Communicator (the world and each sub-group) owns one CommThread. The ops of one group run
//    on its thread one at a time, in start order: per group, priority = start order (callers start
//    communication in the order the computations that depend on it will run, MegaScale §3.2).
//  - Different groups are independent streams: their threads progress concurrently, so two ranks
//    that start ops of two groups in opposite orders do not wait on each other in a cycle.
//  - Posted send/recv ops (two-phase backends) stay posted until a caller waits on that op (which
//    completes it alone: waiting on a receive never waits on an unrelated earlier send, MegaScale's
//    decoupled send/recv), or until the next op of the same group that is not a posted send/recv
//    runs (which completes every posted op first, in post order).
//  - The thread starts on the first op (a group that never communicates costs no thread) and is
//    drained and joined when the CommThread is destroyed. At process exit an atexit handler
//    (stop_all_comm_threads) drains and joins every comm thread still running, before the MPI
//    backend finalises MPI; after that a CommThread runs its work inline on the caller's thread,
//    one task at a time (only objects outliving exit get there).
//  - The hot path allocates no more than a std::function per op and the queue's deque blocks.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ms::detail {

class CommThread;

struct WorkState {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  bool posted_kind = false;      // a send/recv: may sit posted until something completes it
  bool flush_requested = false;  // a waiter has queued the completion of this posted op
  CommThread* thread = nullptr;  // posted kinds: the thread that completes them (its communicator
                                 // drains, completing them, before it goes)
  std::exception_ptr error;
  // An op a device_native() engine enqueued on a device stream: its completion event (a
  // cudaEvent_t owned by the pointer), set once enqueued (Communicator::op_enqueued).
  std::shared_ptr<void> done_event;
  void enqueued(std::shared_ptr<void> ev) {
    std::lock_guard lk(m);
    done_event = std::move(ev);
    cv.notify_all();
  }
  void finish(std::exception_ptr e) {
    std::lock_guard lk(m);
    error = std::move(e);
    done = true;
    cv.notify_all();
  }
};

class CommThread {
 public:
  CommThread() = default;
  ~CommThread();  // stop(), then forgotten by the exit handler
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Name of the thread (pthread name "ms-comm <label>", cut to 15 characters), for debuggers.
  // Set before the first op.
  void set_label(const std::string& label) { label_ = label; }

  // Queues fn (starting the thread on first use). After stop: runs fn inline. fn must not throw.
  void post(std::function<void()> fn);
  // Runs fn on the thread after every task queued before it (completing posted ops first) and
  // waits; rethrows what fn threw. Inline when called on the thread itself, or after stop.
  void run(const std::function<void()>& fn);
  // Waits until every task queued so far has run and every posted op has completed. Nothing to do
  // when the thread never started (nothing was ever queued).
  void drain();
  // Runs what is queued, then joins the thread; afterwards post() runs inline. Idempotent and safe
  // from several threads at once; a no-op when called on the thread itself.
  void stop();

  // On the thread (or inline after stop) only: queue the completion of the posted op whose state is
  // st / complete every posted op, in post order.
  void defer_posted_completion(const WorkState* st, std::function<void()> fn) { posted_.push_back({st, std::move(fn)}); }
  void complete_posted();
  // A waiter on a posted send/recv of this thread: queues the completion of that op alone, once
  // (the op itself was queued earlier, so it is posted by then). st is kept alive by the queued task.
  void request_completion(const std::shared_ptr<WorkState>& st);

 private:
  enum class State : uint8_t { kIdle, kRunning, kStopping, kDone };
  bool start();  // kIdle -> kRunning (registered with the exit handler), or kDone during exit
  void loop();
  void run_inline(const std::function<void()>& fn);
  bool on_this_thread() const;

  std::mutex m_;
  std::condition_variable cv_;       // work queued or stop requested
  std::condition_variable joined_cv_;
  std::deque<std::function<void()>> q_;
  State state_ = State::kIdle;
  bool stop_requested_ = false, joined_ = false;
  std::thread thread_;
  std::recursive_mutex inline_mu_;       // after stop: inline tasks one at a time
  void complete_one(const WorkState* st);  // the posted op of st, if still posted
  struct Posted {
    const WorkState* state;           // identifies the op (kept alive by fn's capture)
    std::function<void()> complete;
  };
  std::deque<Posted> posted_;  // completions of posted ops (thread, or inline_mu_)
  std::string label_;
};

// Drains and joins every comm thread still running; afterwards every CommThread, started or not,
// runs its work inline. Registered with atexit when the first comm thread starts; the MPI backend
// calls it before MPI_Finalize. Idempotent.
void stop_all_comm_threads();

}  // namespace ms::detail
