// comm_thread: the one communication thread of a process and the completion state of an op
// (internal to comm/). Every communicator queues its ops on this thread, in start order (FIFO),
// so ops of different groups never run concurrently and a rank's op order is its start order.
// Posted send/recv ops (two-phase backends) complete in post order, before the next op that is not
// a posted send/recv runs, or when a caller waits on one of them.
// The thread starts on first use; an atexit handler drains the queue and joins it. After that,
// work runs inline on the caller's thread (only destructors of objects outliving exit get there).
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>

namespace ms::detail {

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

// Queues fn on the communication thread (runs it inline after shutdown). fn must not throw.
void post_to_comm_thread(std::function<void()> fn);
// Runs fn on the communication thread after every op queued before it (completing posted ops
// first) and waits; rethrows what fn threw. Inline when called on the thread itself.
void run_on_comm_thread(const std::function<void()>& fn);
// Communication thread only: queue the completion of a posted op / complete every posted op.
void defer_posted_completion(std::function<void()> fn);
void complete_posted();

}  // namespace ms::detail
