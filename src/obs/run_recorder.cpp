// run_recorder.cpp: see run_recorder.h.
#include "obs/run_recorder.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "base/check.h"        // MS_CHECK
#include "base/log.h"          // logger
#include "obs/rank_identity.h"  // rank_identity, identity_json

namespace ms {
namespace {

std::atomic<RunRecorder*> g_active{nullptr};

int64_t unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Text from libraries (error messages) may not be valid UTF-8: replaced, never a throw.
std::string dump_line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

nlohmann::json record_json(const TraceRecord& r, bool comm, const RankIdentity& id) {
  auto t = [](int64_t ns) { return ns ? to_aligned_ns(ns) : 0; };
  if (!comm) {
    // "forward 3.1": micro-batch 3, chunk 1.
    int mb = -1, chunk = -1;
    const size_t sp = r.name.find(' ');
    if (sp != std::string_view::npos) std::sscanf(std::string(r.name.substr(sp + 1)).c_str(), "%d.%d", &mb, &chunk);
    return {{"type", "span"}, {"seg", r.seg}, {"name", r.name}, {"step", r.step}, {"mb", mb}, {"chunk", chunk},
            {"t0", t(r.start_ns)}, {"t1", t(r.end_ns)}};
  }
  int peer_world = -1;
  if (r.peer >= 0) {
    auto g = id.groups.find(r.group);
    if (g != id.groups.end() && r.peer < static_cast<int>(g->second.size())) peer_world = g->second[r.peer];
  }
  return {{"type", "comm"}, {"seg", r.seg}, {"op", r.name}, {"group", r.group}, {"seq", r.seq},
          {"bytes", r.bytes}, {"peer", r.peer}, {"peer_world", peer_world}, {"step", r.step},
          {"tq", t(r.enqueue_ns)}, {"t0", t(r.start_ns)}, {"t1", t(r.end_ns)}, {"status", r.status}};
}

}  // namespace

RunRecorder::RunRecorder(const std::string& path, int flush_ms) : path_(path), flush_ms_(flush_ms) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  file_ = std::fopen(path.c_str(), "w");
  MS_CHECK(file_, "records: cannot create {}: {}", path, std::strerror(errno));
  nlohmann::json h = identity_json(rank_identity());
  h["type"] = "header";
  h["format"] = 1;
  const ClockOffset o = clock_offset();
  h["clock"] = {{"offset_ns", o.offset_ns}, {"rtt_ns", o.rtt_ns}};
  // The pair maps the file's (aligned) times to wall-clock time: unix = unix_ns + (t - aligned_ns).
  h["aligned_ns"] = aligned_now_ns();
  h["unix_ns"] = unix_ns();
  {
    std::lock_guard lk(q_mu_);
    queued_.push_back(dump_line(h));
  }
  flush();
  RunRecorder* expected = nullptr;
  g_active.compare_exchange_strong(expected, this);
  thread_ = std::thread([this] { run(); });
}

RunRecorder::~RunRecorder() {
  {
    std::lock_guard lk(q_mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  RunRecorder* self = this;
  g_active.compare_exchange_strong(self, nullptr);
  flush();
  std::lock_guard lk(io_mu_);
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

void RunRecorder::step(nlohmann::json fields) {
  fields["type"] = "step";
  {
    std::lock_guard io(io_mu_);
    if (lost_) fields["lost"] = lost_;
  }
  std::lock_guard lk(q_mu_);
  queued_.push_back(dump_line(fields));
}

void RunRecorder::event(std::string_view name, std::string_view detail) {
  const nlohmann::json j = {{"type", "event"}, {"name", name}, {"step", TraceSink::get().step()},
                            {"t", aligned_now_ns()}, {"detail", detail}};
  std::lock_guard lk(q_mu_);
  queued_.push_back(dump_line(j));
}

void RunRecorder::clock(int step, ClockOffset o) {
  const nlohmann::json j = {{"type", "clock"}, {"step", step}, {"offset_ns", o.offset_ns}, {"rtt_ns", o.rtt_ns}};
  std::lock_guard lk(q_mu_);
  queued_.push_back(dump_line(j));
}

void RunRecorder::flush() {
  std::vector<std::string> queued;
  std::lock_guard io(io_mu_);
  {
    std::lock_guard lk(q_mu_);
    queued.swap(queued_);
  }
  write_locked(queued);
}

void RunRecorder::write_locked(std::vector<std::string>& queued) {
  if (!file_ || failed_) return;
  const RankIdentity id = rank_identity();
  std::string out;
  // Queued lines first: the header, and steps/events that happened before the records collected now ended.
  for (const std::string& s : queued) out += s;
  for (int track = 0; track < 2; track++) {
    batch_.clear();
    lost_ += TraceSink::get().collect(static_cast<TraceTrack>(track), next_[track], pending_[track], batch_);
    for (const TraceRecord& r : batch_) out += dump_line(record_json(r, track == 1, id));
  }
  if (out.empty()) return;
  if (std::fwrite(out.data(), 1, out.size(), file_) != out.size() || std::fflush(file_) != 0) {
    failed_ = true;
    logger().warn("records: writing {} failed ({}); recording stops, training goes on", path_, std::strerror(errno));
  }
}

void RunRecorder::run() {
  std::unique_lock lk(q_mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(flush_ms_), [&] { return stop_; });
    if (stop_) break;
    lk.unlock();
    flush();
    lk.lock();
  }
}

void record_event(std::string_view name, std::string_view detail) {
  if (RunRecorder* r = g_active.load()) r->event(name, detail);
}

void flush_active_recorder() {
  if (RunRecorder* r = g_active.load()) r->flush();
}

}  // namespace ms
