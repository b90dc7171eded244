// comm_thread.cpp: see comm_thread.h; also CommWork (communicator.h), whose wait() may have to
// queue the completion of posted ops on the op's thread.
#include "comm/comm_thread.h"

#include <pthread.h>  // pthread_setname_np

#include <algorithm>  // std::remove
#include <atomic>
#include <cstdlib>  // std::atexit
#include <memory>
#include <vector>

#include "base/check.h"          // MS_CHECK
#include "base/device.h"         // stream_wait (CommWork::wait_on)
#include "base/thread_pin.h"     // restore_thread_affinity
#include "comm/comm_fatal.h"    // comm_timeout
#include "comm/communicator.h"  // CommWork
#include "obs/watchdog.h"        // WatchedWait

namespace ms {

void CommWork::wait() {
  MS_CHECK(state_, "CommWork::wait on an empty handle");
  if (state_->posted_kind) state_->thread->request_completion(state_);
  std::unique_lock lk(state_->m);
  state_->cv.wait(lk, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
}

void CommWork::wait_on(Stream s) {
  MS_CHECK(state_, "CommWork::wait_on on an empty handle");
  if (state_->posted_kind) return wait();  // two-phase send/recv: completed by a host wait
  std::shared_ptr<void> ev;
  {
    std::unique_lock lk(state_->m);
    state_->cv.wait(lk, [&] { return state_->done || state_->done_event; });
    if (state_->done) {
      if (state_->error) std::rethrow_exception(state_->error);
      return;
    }
    ev = state_->done_event;
  }
  stream_wait(s, Event{ev.get()});
}

bool CommWork::done() const {
  if (!state_) return true;
  if (state_->posted_kind) state_->thread->request_completion(state_);
  std::lock_guard lk(state_->m);
  return state_->done;
}

namespace detail {

namespace {

thread_local CommThread* tl_current = nullptr;  // the CommThread whose task this thread runs

// Every started comm thread, for the exit handler. Lock order: Registry::m, then a CommThread's m_.
struct Registry {
  std::mutex m;
  std::vector<CommThread*> live;
  bool exiting = false;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: communicators may outlive exit
  return *r;
}

std::atomic<bool> g_exiting{false};  // set first by stop_all_comm_threads

}  // namespace

CommThread::~CommThread() {
  stop();
  Registry& r = registry();
  std::lock_guard lk(r.m);
  r.live.erase(std::remove(r.live.begin(), r.live.end(), this), r.live.end());
}

bool CommThread::on_this_thread() const { return tl_current == this; }

void CommThread::post(std::function<void()> fn) {
  for (;;) {
    {
      std::lock_guard lk(m_);
      if (state_ == State::kRunning || state_ == State::kStopping) {  // a stopping loop drains q_ first
        q_.push_back(std::move(fn));
        cv_.notify_one();
        return;
      }
      if (state_ == State::kDone) break;
    }
    if (!start()) break;
  }
  run_inline(fn);
}

bool CommThread::start() {
  Registry& r = registry();
  std::unique_lock rl(r.m, std::defer_lock);
  // The exit handler holds r.m while it joins threads: never wait for it, run inline instead.
  while (!g_exiting && !rl.try_lock()) std::this_thread::yield();
  std::lock_guard lk(m_);
  if (state_ != State::kIdle) return state_ != State::kDone;
  if (!rl.owns_lock() || r.exiting) {
    state_ = State::kDone;
    return false;
  }
  static const bool at_exit = (std::atexit(stop_all_comm_threads), true);
  (void)at_exit;
  r.live.push_back(this);
  state_ = State::kRunning;
  thread_ = std::thread([this] { loop(); });
  return true;
}

void CommThread::loop() {
  tl_current = this;
  const std::string name = ("comm " + label_).substr(0, 15);  // pthread names hold 15 characters
  pthread_setname_np(pthread_self(), name.c_str());
  restore_thread_affinity();  // started on first use, often after the compute threads were pinned
  try {
    bind_selected_device();  // GPU ops (staging copies, NCCL events) on the process's GPU
  } catch (const std::exception&) {
    // No usable device: an op that needs one fails with its own error.
  }
  std::unique_lock lk(m_);
  for (;;) {
    cv_.wait(lk, [&] { return state_ == State::kStopping || !q_.empty(); });
    if (q_.empty()) {  // stopping and drained
      state_ = State::kDone;
      return;
    }
    {
      std::function<void()> fn = std::move(q_.front());
      q_.pop_front();
      lk.unlock();
      fn();  // tasks catch their own exceptions
    }
    lk.lock();
  }
}

void CommThread::run_inline(const std::function<void()>& fn) {
  std::lock_guard lk(inline_mu_);
  CommThread* const prev = tl_current;
  tl_current = this;
  fn();
  tl_current = prev;
}

void CommThread::run(const std::function<void()>& fn) {
  auto body = [&] {
    complete_posted();
    fn();
  };
  if (on_this_thread()) return body();
  auto st = std::make_shared<WorkState>();
  post([&body, st] {
    std::exception_ptr e;
    try {
      body();
    } catch (...) {
      e = std::current_exception();
    }
    st->finish(e);
  });
  std::unique_lock lk(st->m);
  st->cv.wait(lk, [&] { return st->done; });
  if (st->error) std::rethrow_exception(st->error);
}

void CommThread::drain() {
  {
    std::lock_guard lk(m_);
    if (state_ == State::kIdle) return;  // nothing was ever queued
  }
  run([] {});
}

void CommThread::stop() {
  if (on_this_thread()) return;  // a thread cannot join itself
  std::unique_lock lk(m_);
  if (stop_requested_) {  // another caller joins (or has joined)
    joined_cv_.wait(lk, [&] { return joined_; });
    return;
  }
  stop_requested_ = true;
  if (!thread_.joinable()) {  // never started
    state_ = State::kDone;
    joined_ = true;
    return;
  }
  if (state_ == State::kRunning) state_ = State::kStopping;
  cv_.notify_one();
  lk.unlock();
  thread_.join();
  lk.lock();
  joined_ = true;
  joined_cv_.notify_all();
}

void CommThread::complete_posted() {
  while (!posted_.empty()) {
    std::function<void()> f = std::move(posted_.front().complete);
    posted_.pop_front();
    f();
  }
}

void CommThread::complete_one(const WorkState* st) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if (it->state != st) continue;
    std::function<void()> f = std::move(it->complete);
    posted_.erase(it);
    f();
    return;
  }
}

void CommThread::request_completion(const std::shared_ptr<WorkState>& st) {
  {
    std::lock_guard lk(st->m);
    if (!st->posted_kind || st->done || st->flush_requested) return;
    st->flush_requested = true;
  }
  post([this, st] { complete_one(st.get()); });
}

void stop_all_comm_threads() {
  g_exiting = true;
  Registry& r = registry();
  std::lock_guard lk(r.m);
  r.exiting = true;
  // Each thread finishes its queued ops (each bounded by its deadline) first; the hang watchdog, when
  // it runs, bounds the whole join (obs/watchdog.h).
  WatchedWait watched("join comm threads", "world", 2 * comm_timeout());
  for (CommThread* t : r.live) t->stop();
}

}  // namespace detail
}  // namespace ms
