// output_queue: a bounded queue of output written to a file descriptor by a thread of its own, so
// that an event loop (the driver's, an executor's) never blocks on a reader that does not read
// (docs/reliability.md "Driver and executors": `megascale launch ... | { sleep 60; cat; }` must not
// stall training or cost a healthy host).
//  - push_line: a droppable line (rank output, forwarded stderr). When the queued droppable bytes
//    would pass `max_bytes`, the line is dropped and counted; once there is room again, a note
//    "<note_prefix>N line(s) dropped: the output was not read" goes first (no note when the prefix
//    is empty: on the control channel a note would not be a message).
//  - push_kept: a message that is never dropped (heartbeats, self-check reports, the driver's own
//    messages); callers keep these few (an executor sends a beat only when the last one left:
//    kept_pending()).
// The writer thread does ordinary blocking writes, so the descriptor's flags (shared with other
// processes, e.g. a terminal) are never touched. EPIPE (nobody will read) drops everything after it.
// flush(limit) waits until the queue is written or the limit passes; the destructor flushes for at
// most `close_limit` and then leaves the thread (blocked in a write to a stopped reader) behind,
// detached, so that the owner can still exit. Thread-safe.
// make_queue_logger: a logger like base/log.h's make_named_logger ("<name>: <text>") whose lines go
// through a queue as kept messages (a component's own few messages are never dropped).
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace ms::launch {

class OutputQueue {
 public:
  // fd: where the bytes go (not owned); max_bytes: the droppable bytes queued at most.
  OutputQueue(int fd, size_t max_bytes, std::string note_prefix = "",
              std::chrono::milliseconds close_limit = std::chrono::milliseconds(2000));
  ~OutputQueue();
  OutputQueue(const OutputQueue&) = delete;
  OutputQueue& operator=(const OutputQueue&) = delete;

  // Queues `text` and a '\n' unless full; false when dropped.
  bool push_line(const std::string& text);
  // Queues `text` and a '\n'; never dropped.
  void push_kept(const std::string& text);
  // A kept message is queued and not yet handed to write().
  bool kept_pending() const;
  // Lines dropped so far.
  size_t dropped() const;
  // Waits until everything queued is written (or dropped after EPIPE) or `limit` passes; true when empty.
  bool flush(std::chrono::milliseconds limit);

 private:
  struct State;
  std::shared_ptr<State> s_;
  std::chrono::milliseconds close_limit_;
};

std::shared_ptr<spdlog::logger> make_queue_logger(const std::string& name, std::shared_ptr<OutputQueue> queue);

}  // namespace ms::launch
