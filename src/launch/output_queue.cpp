// output_queue: see output_queue.h.
#include "launch/output_queue.h"

#include <unistd.h>  // write

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>

namespace ms::launch {

struct OutputQueue::State {
  struct Item {
    std::string text;
    bool kept = false;
  };
  int fd = -1;
  size_t max_bytes = 0;
  std::string note_prefix;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Item> items;
  size_t droppable_bytes = 0, dropped = 0, unnoted = 0, kept_queued = 0;
  bool in_flight = false, stop = false, broken = false;
  std::thread thread;

  // Writes all of s; false on EPIPE (or another error: the reader is gone either way).
  bool write_all(const std::string& s) const {
    const char* p = s.data();
    size_t n = s.size();
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      p += w, n -= (size_t)w;
    }
    return true;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !items.empty(); });
      if (items.empty()) return;  // stop, and nothing left
      Item it = std::move(items.front());
      items.pop_front();
      if (it.kept) kept_queued--;
      else droppable_bytes -= it.text.size();
      if (broken) {
        cv.notify_all();
        continue;
      }
      in_flight = true;
      lock.unlock();
      const bool ok = write_all(it.text);
      lock.lock();
      in_flight = false;
      if (!ok) broken = true;
      cv.notify_all();
    }
  }
};

OutputQueue::OutputQueue(int fd, size_t max_bytes, std::string note_prefix, std::chrono::milliseconds close_limit)
    : s_(std::make_shared<State>()), close_limit_(close_limit) {
  s_->fd = fd;
  s_->max_bytes = max_bytes;
  s_->note_prefix = std::move(note_prefix);
  std::shared_ptr<State> s = s_;
  s_->thread = std::thread([s] { s->run(); });
}

OutputQueue::~OutputQueue() {
  flush(close_limit_);
  std::unique_lock<std::mutex> lock(s_->mu);
  s_->stop = true;
  const bool done = s_->items.empty() && !s_->in_flight;
  if (!done) s_->items.clear(), s_->droppable_bytes = 0, s_->kept_queued = 0;
  lock.unlock();
  s_->cv.notify_all();
  if (done) s_->thread.join();
  else s_->thread.detach();  // blocked in a write to a reader that does not read: it keeps s_ alive
}

bool OutputQueue::push_line(const std::string& text) {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (s_->broken) return false;
  if (s_->droppable_bytes + text.size() + 1 > s_->max_bytes) {
    s_->dropped++, s_->unnoted++;
    return false;
  }
  if (s_->unnoted > 0 && !s_->note_prefix.empty()) {
    std::string note = fmt::format("{}{} line(s) dropped: the output was not read\n", s_->note_prefix, s_->unnoted);
    s_->droppable_bytes += note.size();
    s_->items.push_back({std::move(note), false});
  }
  s_->unnoted = 0;
  s_->droppable_bytes += text.size() + 1;
  s_->items.push_back({text + "\n", false});
  s_->cv.notify_all();
  return true;
}

void OutputQueue::push_kept(const std::string& text) {
  std::lock_guard<std::mutex> lock(s_->mu);
  if (s_->broken) return;
  s_->kept_queued++;
  s_->items.push_back({text + "\n", true});
  s_->cv.notify_all();
}

bool OutputQueue::kept_pending() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->kept_queued > 0;
}

size_t OutputQueue::dropped() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->dropped;
}

bool OutputQueue::flush(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(s_->mu);
  return s_->cv.wait_for(lock, limit, [&] { return s_->items.empty() && !s_->in_flight; });
}

namespace {
class QueueSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit QueueSink(std::shared_ptr<OutputQueue> q) : q_(std::move(q)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    std::string line(buf.data(), buf.size());
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    q_->push_kept(line);
  }
  void flush_() override {}

 private:
  std::shared_ptr<OutputQueue> q_;
};
}  // namespace

std::shared_ptr<spdlog::logger> make_queue_logger(const std::string& name, std::shared_ptr<OutputQueue> queue) {
  auto l = std::make_shared<spdlog::logger>(name, std::make_shared<QueueSink>(std::move(queue)));
  l->set_pattern("%n: %v");
  return l;
}

}  // namespace ms::launch
