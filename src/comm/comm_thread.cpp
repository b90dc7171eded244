// comm_thread.cpp: see comm_thread.h; also CommWork (communicator.h), whose wait() may have to
// queue the completion of posted ops.
#include "comm/comm_thread.h"

#include <cstdlib>  // std::atexit
#include <deque>
#include <memory>
#include <thread>

#include "base/check.h"          // MS_CHECK
#include "comm/communicator.h"  // CommWork

namespace ms {

namespace detail {
namespace {
void request_completion(WorkState& st);  // below, with the thread
}  // namespace
}  // namespace detail

using detail::request_completion;

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

namespace detail {

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
    auto st = std::make_shared<WorkState>();
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

}  // namespace

void complete_posted() {
  while (!g_posted.empty()) {
    auto f = std::move(g_posted.front());
    g_posted.pop_front();
    f();
  }
}

namespace {

// A waiter on a send/recv queues the completion of every posted op (once): the op itself was
// queued earlier, so it is posted by then.
void request_completion(WorkState& st) {
  {
    std::lock_guard lk(st.m);
    if (!st.posted_kind || st.done || st.flush_requested) return;
    st.flush_requested = true;
  }
  CommThread::get().post(complete_posted);
}

}  // namespace

void post_to_comm_thread(std::function<void()> fn) { CommThread::get().post(std::move(fn)); }

void run_on_comm_thread(const std::function<void()>& fn) {
  CommThread::get().run([&fn] {
    complete_posted();
    fn();
  });
}

void defer_posted_completion(std::function<void()> fn) { g_posted.push_back(std::move(fn)); }

}  // namespace detail
}  // namespace ms
