// timeline.cpp: see timeline.h.
#include "obs/timeline.h"

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"  // write_file_atomic
#include "obs/trace_sink.h"    // TraceSink

namespace ms {

namespace {

void write_json(const std::string& path, const nlohmann::json& doc, int indent) {
  // Error texts may carry arbitrary bytes from a library: replace invalid UTF-8 rather than fail.
  const std::string text = doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  write_text_atomic(path, text);
}

std::string str(std::string_view s) { return std::string(s); }

}  // namespace

void write_chrome_trace(const std::string& path, int rank) {
  nlohmann::json ev = nlohmann::json::array();
  auto us = [](int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
  ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "compute"}}}});
  const TraceSink& sink = TraceSink::get();
  // One row per communication group (each group has its own stream, so their ops overlap in time).
  std::map<std::string, int> rows;
  auto row_of = [&](const std::string& group) {
    auto [it, added] = rows.emplace(group, static_cast<int>(rows.size()) + 1);
    if (added)
      ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", it->second},
                    {"args", {{"name", "comm " + group}}}});
    return it->second;
  };
  for (const TraceRecord& s : sink.snapshot(TraceTrack::kCompute))
    ev.push_back({{"name", str(s.name)}, {"ph", "X"}, {"pid", rank}, {"tid", 0}, {"ts", us(s.start_ns)},
                  {"dur", us(s.end_ns - s.start_ns)}});
  for (const TraceRecord& r : sink.snapshot(TraceTrack::kComm)) {
    if (r.start_ns == 0 || r.end_ns == 0) continue;
    const int tid = row_of(r.group);
    ev.push_back({{"name", str(r.name) + " " + r.group}, {"ph", "X"}, {"pid", rank}, {"tid", tid}, {"ts", us(r.start_ns)},
                  {"dur", us(r.end_ns - r.start_ns)},
                  {"args", {{"seq", r.seq}, {"bytes", r.bytes}, {"status", r.status}, {"queued_us", us(r.start_ns - r.enqueue_ns)}}}});
  }
  write_json(path, {{"traceEvents", ev}, {"displayTimeUnit", "ms"}}, -1);
}

void write_comm_trace(const std::string& path) {
  nlohmann::json arr = nlohmann::json::array();
  for (const TraceRecord& r : TraceSink::get().snapshot(TraceTrack::kComm)) {
    arr.push_back({{"seq", r.seq}, {"op", str(r.name)}, {"group", r.group}, {"bytes", r.bytes}, {"peer", r.peer},
                   {"enqueue_ns", r.enqueue_ns}, {"start_ns", r.start_ns}, {"end_ns", r.end_ns},
                   {"status", r.status}});
  }
  write_json(path, arr, 1);
}

}  // namespace ms
