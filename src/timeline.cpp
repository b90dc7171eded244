// timeline.cpp: see timeline.h.
#include "timeline.h"

#include <chrono>

#include <nlohmann/json.hpp>

#include "atomic_file.h"  // write_file_atomic
#include "comm.h"         // comm_trace

namespace ms {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Timeline::span(const char* name, int64_t start_ns, int64_t end_ns) {
  if (!on_) return;
  if (spans_.size() < cap_) {
    spans_.push_back({name, start_ns, end_ns});
  } else {
    spans_[next_] = {name, start_ns, end_ns};
    next_ = (next_ + 1) % cap_;
  }
}

void Timeline::write_chrome(const std::string& path, int rank) const {
  nlohmann::json ev = nlohmann::json::array();
  auto us = [](int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "compute"}}}});
  ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 1}, {"args", {{"name", "communication"}}}});
  for (const Span& s : spans_)
    ev.push_back({{"name", s.name}, {"ph", "X"}, {"pid", rank}, {"tid", 0}, {"ts", us(s.start)}, {"dur", us(s.end - s.start)}});
  for (const CommRecord& r : comm_trace()) {
    if (r.start_ns == 0 || r.end_ns == 0) continue;
    ev.push_back({{"name", r.op + " " + r.group}, {"ph", "X"}, {"pid", rank}, {"tid", 1}, {"ts", us(r.start_ns)},
                  {"dur", us(r.end_ns - r.start_ns)},
                  {"args", {{"seq", r.seq}, {"bytes", r.bytes}, {"status", r.status}, {"queued_us", us(r.start_ns - r.enqueue_ns)}}}});
  }
  nlohmann::json doc = {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
  const std::string text = doc.dump();
  write_file_atomic(path, {{text.data(), text.size()}});
}

}  // namespace ms
