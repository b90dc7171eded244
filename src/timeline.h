// timeline: a per-rank record of compute spans (forward, backward, optimizer, waits) merged with the
// communication ring buffer (comm.h) into a Chrome trace (chrome://tracing, Perfetto): one process
// per rank, thread 0 = compute, thread 1 = communication thread. Times are steady-clock ns, the
// clock the comm records use, so the two rows line up. Spans are kept in a fixed-capacity ring
// (no allocation once full); recording is off unless enabled.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ms {

int64_t steady_ns();

class Timeline {
 public:
  explicit Timeline(size_t capacity = 65536) : cap_(capacity) {}
  void enable(bool on) { on_ = on; }
  bool enabled() const { return on_; }
  // name must be a string literal (kept by pointer).
  void span(const char* name, int64_t start_ns, int64_t end_ns);
  // Chrome trace JSON of this rank: the spans plus comm_trace(); written atomically.
  void write_chrome(const std::string& path, int rank) const;

 private:
  struct Span { const char* name; int64_t start, end; };
  size_t cap_;
  bool on_ = false;
  std::vector<Span> spans_;
  size_t next_ = 0;
};

// RAII span.
class TimelineScope {
 public:
  TimelineScope(Timeline* t, const char* name) : t_(t && t->enabled() ? t : nullptr), name_(name),
                                                 start_(t_ ? steady_ns() : 0) {}
  ~TimelineScope() { if (t_) t_->span(name_, start_, steady_ns()); }
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;

 private:
  Timeline* t_;
  const char* name_;
  int64_t start_;
};

}  // namespace ms
