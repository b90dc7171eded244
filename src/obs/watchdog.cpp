// watchdog.cpp: see watchdog.h.
#include "obs/watchdog.h"

#include <pthread.h>  // pthread_setname_np
#include <unistd.h>   // _exit

#include <csignal>  // SIGTERM, SIGINT
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"  // MS_CHECK
#include "base/clock.h"  // steady_ns
#include "obs/run_recorder.h"  // flush_active_recorder

namespace ms {
namespace {

std::atomic<Watchdog*> g_watchdog{nullptr};

// The WatchedWaits in progress (not ring records: they would mix with the ops in traces and records).
struct Waits {
  std::mutex m;
  uint64_t next = 0;
  std::map<uint64_t, TraceRecord> open;
};
Waits& waits() {
  static Waits* w = new Waits();  // never destroyed: waits happen during exit
  return *w;
}

bool in_flight(const TraceRecord& r) { return r.deadline_ns > 0 && r.start_ns > 0 && r.end_ns == 0; }

std::string seconds(int64_t ns) { return fmt::format("{:.1f} s", static_cast<double>(ns) / 1e9); }

}  // namespace

Watchdog& Watchdog::start(WatchdogOptions opt) {
  auto* w = new Watchdog(std::move(opt));  // never destroyed: it guards the exit too
  Watchdog* expected = nullptr;
  MS_CHECK(g_watchdog.compare_exchange_strong(expected, w), "the hang watchdog was already started in this process");
  w->last_tick_ns_ = steady_ns();
  std::thread([w] { w->loop(); }).detach();
  return *w;
}

Watchdog* Watchdog::get() { return g_watchdog.load(); }

Watchdog::Watchdog(WatchdogOptions opt) : opt_(std::move(opt)) {}

std::string Watchdog::dump_path() const {
  const RankIdentity id = rank_identity();
  return hang_dump_path(opt_.out_dir, id.world > 1 || opt_.world <= 1 ? id.rank : opt_.rank);
}

std::string Watchdog::rank_text() const {
  const RankIdentity id = rank_identity();
  if (id.world <= 1 && opt_.world > 1) return fmt::format("rank {}", opt_.rank);
  return fmt::format("rank {} (tp={},dp={},pp={})", id.rank, id.tp, id.dp, id.pp);
}

std::vector<TraceRecord> Watchdog::overdue(const std::vector<TraceRecord>& ring, int64_t now_ns, int64_t grace_ns) {
  std::vector<TraceRecord> out;
  for (const TraceRecord& r : ring)
    if (in_flight(r) && now_ns > r.deadline_ns + grace_ns) out.push_back(r);
  return out;
}

std::vector<TraceRecord> Watchdog::suspects(const std::vector<TraceRecord>& ring, int64_t now_ns, double fraction) {
  std::vector<TraceRecord> out;
  for (const TraceRecord& r : ring)
    if (in_flight(r) && now_ns > r.start_ns + static_cast<int64_t>(fraction * static_cast<double>(r.deadline_ns - r.start_ns)))
      out.push_back(r);
  return out;
}

std::string Watchdog::describe(const TraceRecord& r, int64_t now_ns) {
  const std::string peer = r.peer >= 0 ? fmt::format(", peer {}", r.peer) : "";
  const int64_t late = now_ns - r.deadline_ns;
  return fmt::format("{} on group '{}' (seq {}{}) running {}, {} {} its deadline", r.name, r.group, r.seq, peer,
                     seconds(now_ns - r.start_ns), seconds(late < 0 ? -late : late), late < 0 ? "before" : "past");
}

void Watchdog::loop() {
  pthread_setname_np(pthread_self(), "ms-watchdog");
  for (;;) {
    std::this_thread::sleep_for(opt_.tick);
    if (ending_) continue;
    try {
      tick();
    } catch (const std::exception& e) {  // a failed dump must not end the watchdog
      std::fprintf(stderr, "megascale watchdog: %s\n", e.what());
    }
  }
}

void Watchdog::tick() {
  const int64_t now = steady_ns();
  {
    // Under m_ with the tick's time, so a dump from the signal thread sees the freeze either as
    // pending (write) or as recorded here, never neither.
    std::lock_guard lk(m_);
    const int64_t gap = now - last_tick_ns_.exchange(now) - std::chrono::nanoseconds(opt_.tick).count();
    if (gap > std::chrono::nanoseconds(opt_.frozen_threshold).count() && gap > frozen_ns_)
      frozen_ns_ = gap, frozen_end_ns_ = now;
  }
  std::vector<TraceRecord> ring = TraceSink::get().snapshot(TraceTrack::kComm);
  for (TraceRecord& w : watched_waits()) ring.push_back(std::move(w));
  const int64_t grace = std::chrono::nanoseconds(opt_.grace).count();
  std::vector<TraceRecord> late = overdue(ring, now, grace);
  if (!late.empty()) {
    std::string what = "watchdog: " + describe(late.front(), now);
    if (late.size() > 1) what += fmt::format(" (and {} more op(s) past their deadline)", late.size() - 1);
    fatal(HangDumpKind::kTimeout, what);
  }
  std::vector<TraceRecord> sus = suspects(ring, now, opt_.suspect_fraction);
  std::lock_guard lk(m_);
  if (signal_written_) return;
  if (!sus.empty() && !suspect_written_) {
    const std::string reason = "watchdog: " + describe(sus.front(), now) + " (provisional dump)";
    write(HangDumpKind::kSuspect, reason, std::move(sus));
    suspect_written_ = true;
  } else if (sus.empty() && suspect_written_) {
    std::error_code ec;
    std::filesystem::remove(dump_path(), ec);
    suspect_written_ = false;
  }
}

void Watchdog::write(HangDumpKind kind, const std::string& reason, std::vector<TraceRecord> stuck) {
  HangDumpInput in;
  in.kind = kind;
  in.reason = reason;
  in.now_ns = steady_ns();
  in.fallback_rank = opt_.rank, in.fallback_world = opt_.world;
  // A tick that has not come yet counts too: a process stopped until just now dumps from its signal thread.
  const int64_t pending = in.now_ns - last_tick_ns_.load() - std::chrono::nanoseconds(opt_.tick).count();
  in.frozen_ns = frozen_ns_, in.frozen_end_ns = frozen_end_ns_;
  if (pending > std::chrono::nanoseconds(opt_.frozen_threshold).count() && pending > in.frozen_ns)
    in.frozen_ns = pending, in.frozen_end_ns = in.now_ns;
  in.comm = TraceSink::get().snapshot(TraceTrack::kComm);
  in.compute = TraceSink::get().snapshot(TraceTrack::kCompute);
  if (stuck.empty()) {
    for (const TraceRecord& r : in.comm)
      if (in_flight(r)) stuck.push_back(r);
    for (TraceRecord& w : watched_waits()) stuck.push_back(std::move(w));
  }
  in.stuck = std::move(stuck);
  write_hang_dump(dump_path(), make_hang_dump(in));
}

void Watchdog::on_signal(int sig) {
  if (ending_) return;
  std::lock_guard lk(m_);
  if (signal_written_) return;
  try {
    write(HangDumpKind::kSignal, fmt::format("signal {} ({}) received", sig, sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "other"), {});
    signal_written_ = true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "megascale watchdog: %s\n", e.what());
  }
}

void Watchdog::fatal(HangDumpKind kind, const std::string& what) {
  if (ending_.exchange(true))  // another thread ends the process
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  std::string where;
  {
    std::lock_guard lk(m_);
    where = dump_path();
    try {
      if (!signal_written_) write(kind, what, {});
      else where += " (the dump taken at the first signal, kept)";
    } catch (const std::exception& e) {
      where = fmt::format("none ({})", e.what());
    }
  }
  std::fprintf(stderr, "megascale: %s: communication %s: %s; hang dump: %s; ending with exit code %d\n",
               rank_text().c_str(), kind == HangDumpKind::kTimeout ? "hang" : "failure", what.c_str(), where.c_str(),
               kHangExitCode);
  // The records so far (the steps this rank completed) reach the file: the driver counts the steps
  // a restart repeats from them.
  try {
    flush_active_recorder();
  } catch (...) {
  }
  std::fflush(stdout);
  std::fflush(stderr);
  if (opt_.end_process) opt_.end_process(kHangExitCode);
  _exit(kHangExitCode);
}

void Watchdog::finish_clean() {
  std::lock_guard lk(m_);
  if (!suspect_written_ && !signal_written_) return;
  std::error_code ec;
  std::filesystem::remove(dump_path(), ec);
  std::filesystem::remove(std::filesystem::path(dump_path()).parent_path(), ec);  // only when empty
  suspect_written_ = signal_written_ = false;
}

std::vector<TraceRecord> watched_waits() {
  Waits& w = waits();
  std::lock_guard lk(w.m);
  std::vector<TraceRecord> out;
  for (const auto& [id, r] : w.open) out.push_back(r);
  return out;
}

WatchedWait::WatchedWait(std::string_view what, std::string group, std::chrono::milliseconds limit) {
  TraceRecord r;
  r.name = what;
  r.group = std::move(group);
  r.enqueue_ns = r.start_ns = steady_ns();
  r.deadline_ns = r.start_ns + std::chrono::nanoseconds(limit).count();
  r.status = "running";
  Waits& w = waits();
  std::lock_guard lk(w.m);
  id_ = w.next++;
  w.open.emplace(id_, std::move(r));
}

WatchedWait::~WatchedWait() {
  Waits& w = waits();
  std::lock_guard lk(w.m);
  w.open.erase(id_);
}

}  // namespace ms
