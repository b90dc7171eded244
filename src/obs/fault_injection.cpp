// fault_injection.cpp: see fault_injection.h.
#include "obs/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"         // MS_CHECK
#include "base/log.h"           // logger
#include "obs/run_recorder.h"   // record_event
#include "obs/trace_sink.h"     // TraceSink (current step)

namespace ms {
namespace {

std::vector<FaultSpec>* g_faults = nullptr;  // this rank's; set once before training
std::atomic<bool> g_slow{false};
std::atomic<int> g_slow_reported{-1};

std::vector<std::string_view> split(std::string_view s, char c) {
  std::vector<std::string_view> out;
  size_t at = 0;
  while (true) {
    const size_t e = s.find(c, at);
    out.push_back(s.substr(at, e == std::string_view::npos ? std::string_view::npos : e - at));
    if (e == std::string_view::npos) return out;
    at = e + 1;
  }
}

template <class T>
T number(std::string_view entry, std::string_view key, std::string_view v) {
  T x{};
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  MS_CHECK(r.ec == std::errc() && r.ptr == v.data() + v.size(), "MEGASCALE_FAULT entry '{}': {}='{}' is not a number",
           entry, key, v);
  return x;
}

}  // namespace

std::vector<FaultSpec> parse_faults(std::string_view text) {
  std::vector<FaultSpec> out;
  for (std::string_view entry : split(text, ';')) {
    if (entry.empty()) continue;
    const std::vector<std::string_view> parts = split(entry, ':');
    FaultSpec f;
    f.kind = std::string(parts[0]);
    MS_CHECK(f.kind == "slow" || f.kind == "sleep" || f.kind == "stop",
             "MEGASCALE_FAULT entry '{}': unknown kind '{}' (slow, sleep, stop)", entry, f.kind);
    for (size_t i = 1; i < parts.size(); i++) {
      const size_t eq = parts[i].find('=');
      MS_CHECK(eq != std::string_view::npos, "MEGASCALE_FAULT entry '{}': '{}' is not key=value", entry, parts[i]);
      const std::string_view k = parts[i].substr(0, eq), v = parts[i].substr(eq + 1);
      if (k == "rank") f.rank = number<int>(entry, k, v);
      else if (k == "seg") f.seg = std::string(v);
      else if (k == "ratio") f.ratio = number<double>(entry, k, v);
      else if (k == "from") f.from = number<int>(entry, k, v);
      else if (k == "step") f.step = number<int>(entry, k, v);
      else if (k == "seconds") f.seconds = number<double>(entry, k, v);
      else MS_CHECK(false, "MEGASCALE_FAULT entry '{}': unknown field '{}'", entry, k);
    }
    MS_CHECK(f.rank >= 0, "MEGASCALE_FAULT entry '{}': rank=R is required", entry);
    if (f.kind == "slow")
      MS_CHECK(!f.seg.empty() && f.ratio > 0 && f.ratio <= 100, "MEGASCALE_FAULT entry '{}': slow needs seg=NAME and "
               "ratio in (0, 100]", entry);
    else
      MS_CHECK(f.step >= 1, "MEGASCALE_FAULT entry '{}': {} needs step=N (>= 1)", entry, f.kind);
    if (f.kind == "sleep")
      MS_CHECK(f.seconds > 0 && f.seconds <= 86400, "MEGASCALE_FAULT entry '{}': sleep needs seconds in (0, 86400]", entry);
    out.push_back(f);
  }
  return out;
}

void init_faults(int rank) {
  const char* env = std::getenv("MEGASCALE_FAULT");
  auto* mine = new std::vector<FaultSpec>();
  if (env)
    for (const FaultSpec& f : parse_faults(env))
      if (f.rank == rank) mine->push_back(f);
  bool slow = false;
  for (const FaultSpec& f : *mine) slow |= f.kind == "slow";
  delete g_faults;
  g_faults = mine;
  g_slow.store(slow, std::memory_order_release);
}

bool slow_faults_set() { return g_slow.load(std::memory_order_acquire); }

void fault_at_step_start(int step) {
  if (!g_faults) return;
  for (const FaultSpec& f : *g_faults) {
    if (f.step != step) continue;
    if (f.kind == "sleep") {
      const std::string what = fmt::format("sleep {:.1f} s at the start of step {}", f.seconds, step);
      logger().warn("fault injected (MEGASCALE_FAULT): {}", what);
      record_event("fault injected", what);
      flush_active_recorder();
      std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
    } else if (f.kind == "stop") {
      const std::string what = fmt::format("SIGSTOP at the start of step {}", step);
      logger().warn("fault injected (MEGASCALE_FAULT): {}", what);
      record_event("fault injected", what);
      flush_active_recorder();
      ::kill(::getpid(), SIGSTOP);
    }
  }
}

void fault_slow_down(int64_t cpu_ns) {
  // Spins on `pause`: the thread holds its CPU for the time (as a slower processor would) while
  // leaving the execution units to a sibling hardware thread, so the fault slows this rank only.
  const int64_t until = thread_cpu_ns() + cpu_ns;
  while (thread_cpu_ns() < until)
    for (int i = 0; i < 64; i++) __builtin_ia32_pause();
}

int64_t fault_extra_ns(std::string_view seg, int64_t ns) {
  if (!g_slow.load(std::memory_order_acquire) || !g_faults) return 0;
  const int step = TraceSink::get().step();
  for (const FaultSpec& f : *g_faults) {
    if (f.kind != "slow" || f.seg != seg || step < f.from) continue;
    if (g_slow_reported.exchange(step) < f.from) {  // once, when it first applies
      const std::string what = fmt::format("every {} span does {:.0f}% more work from step {}", f.seg, f.ratio * 100,
                                           std::max(step, f.from));
      logger().warn("fault injected (MEGASCALE_FAULT): {}", what);
      record_event("fault injected", what);
    }
    return static_cast<int64_t>(static_cast<double>(ns) * f.ratio);
  }
  return 0;
}

}  // namespace ms
