// fault_injection.cpp: see fault_injection.h.
#include "obs/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"         // MS_CHECK
#include "base/log.h"           // logger
#include "obs/run_recorder.h"   // record_event, flush_active_recorder
#include "obs/trace_sink.h"     // TraceSink (current step), set_span_hooks

namespace ms {
namespace {

// This rank's faults of this attempt, with a flag per fault: it has acted (each acts once).
struct Active {
  std::vector<FaultSpec> faults;
  std::unique_ptr<std::atomic<bool>[]> fired;
  int rank = 0;
  int attempt = 0;
};

std::atomic<Active*> g_active{nullptr};  // set before training (init_faults); replaced ones are kept
std::atomic<bool> g_slow{false};   // the span_end hook is installed
std::atomic<bool> g_span{false};   // the span_start hook is installed
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

// Without leading and trailing blanks ("a; b" reads as "a;b").
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

template <class T>
T number(std::string_view entry, std::string_view key, std::string_view v) {
  T x{};
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  MS_CHECK(!v.empty() && r.ec == std::errc() && r.ptr == v.data() + v.size(),
           "MEGASCALE_FAULT entry '{}': {}='{}' is not a number", entry, key, v);
  return x;
}

// The fields each kind takes.
std::string_view fields_of(std::string_view kind) {
  if (kind == "slow") return "rank seg ratio from attempt";
  if (kind == "sleep") return "rank step seconds attempt";
  if (kind == "crash" || kind == "hang") return "rank step seg attempt";
  if (kind == "nan") return "rank step attempt";
  if (kind == "exit") return "rank step code attempt";
  if (kind == "ckpt") return "point rank step attempt";
  return "host attempt";  // selfcheck
}

bool takes(std::string_view kind, std::string_view field) {
  for (std::string_view f : split(fields_of(kind), ' '))
    if (f == field) return true;
  return false;
}

int64_t unix_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string where(int rank, int step, std::string_view seg) {
  return seg.empty() ? fmt::format("at rank {} step {}", rank, step)
                     : fmt::format("at rank {} step {} seg {}", rank, step, seg);
}

Active* active() { return g_active.load(std::memory_order_acquire); }

// crash / hang / exit at rank, step (and seg): announced, then done (exit 1 throws).
void act(const FaultSpec& f, const Active& a, int step, std::string_view seg) {
  if (f.kind == "crash") {
    announce_fault("crash (SIGKILL)", where(a.rank, step, seg), a.attempt);
    std::fflush(nullptr);
    ::kill(::getpid(), SIGKILL);
    ::pause();  // not reached
  } else if (f.kind == "hang") {
    announce_fault("hang (SIGSTOP)", where(a.rank, step, seg), a.attempt);
    ::kill(::getpid(), SIGSTOP);
  } else if (f.kind == "exit") {
    if (f.code == 1) {
      announce_fault("exit (ms::Error, exit code 1)", where(a.rank, step, seg), a.attempt);
      MS_FAIL("injected failure (MEGASCALE_FAULT exit) at rank {} step {} (attempt {})", a.rank, step, a.attempt);
    }
    announce_fault(fmt::format("exit (_exit({}))", f.code), where(a.rank, step, seg), a.attempt);
    std::fflush(nullptr);
    ::_exit(f.code);
  }
}

// An attempt=... value: "all" or a number >= 0.
int parse_attempt(std::string_view entry, std::string_view v) {
  if (v == "all") return FaultSpec::kAllAttempts;
  int x = -1;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  MS_CHECK(!v.empty() && r.ec == std::errc() && r.ptr == v.data() + v.size() && x >= 0,
           "MEGASCALE_FAULT entry '{}': attempt='{}' is neither a number >= 0 nor 'all'", entry, v);
  return x;
}

bool known_ckpt_point(std::string_view p) {
  for (std::string_view k : kCkptPoints)
    if (p == k) return true;
  return false;
}

// The span hooks (obs/trace_sink.h), installed by init_faults only when a fault needs them.
void span_start_hook(std::string_view seg);
void span_end_hook(std::string_view seg, int64_t cpu_ns);

}  // namespace

void announce_fault(std::string_view what, std::string_view where, int attempt) {
  const std::string text = fmt::format("{} {} (attempt {}; unix_ns {})", what, where, attempt, unix_ns());
  logger().warn("fault injected (MEGASCALE_FAULT): {}", text);
  logger().flush();
  record_event("fault injected", text);
  flush_active_recorder();
}

int restart_attempt() {
  const char* env = std::getenv("MEGASCALE_RESTART_COUNT");
  if (!env || !*env) return 0;
  const std::string_view v(env);
  int x = -1;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  MS_CHECK(r.ec == std::errc() && r.ptr == v.data() + v.size() && x >= 0,
           "MEGASCALE_RESTART_COUNT='{}' is not a number >= 0", v);
  return x;
}

namespace {

// One entry's fields into f (kind already set); which fields were given, in `given`.
struct Given {
  bool rank = false, step = false, seg = false, host = false, point = false;
};
Given parse_fields(std::string_view entry, const std::vector<std::string_view>& parts, FaultSpec& f) {
  Given g;
  for (size_t i = 1; i < parts.size(); i++) {
    const size_t eq = parts[i].find('=');
    MS_CHECK(eq != std::string_view::npos, "MEGASCALE_FAULT entry '{}': '{}' is not key=value", entry, parts[i]);
    const std::string_view k = parts[i].substr(0, eq), v = parts[i].substr(eq + 1);
    const bool known = k == "rank" || k == "seg" || k == "ratio" || k == "from" || k == "step" || k == "seconds" ||
                       k == "code" || k == "host" || k == "point" || k == "attempt";
    MS_CHECK(known, "MEGASCALE_FAULT entry '{}': unknown field '{}'", entry, k);
    MS_CHECK(takes(f.kind, k), "MEGASCALE_FAULT entry '{}': field '{}' does not apply to {} (its fields: {})", entry, k,
             parts[0], fields_of(f.kind));
    if (k == "rank") f.rank = number<int>(entry, k, v), g.rank = true;
    else if (k == "seg") f.seg = std::string(v), g.seg = true;
    else if (k == "ratio") f.ratio = number<double>(entry, k, v);
    else if (k == "from") f.from = number<int>(entry, k, v);
    else if (k == "step") f.step = number<int>(entry, k, v), g.step = true;
    else if (k == "seconds") f.seconds = number<double>(entry, k, v);
    else if (k == "code") f.code = number<int>(entry, k, v);
    else if (k == "host") f.host = number<int>(entry, k, v), g.host = true;
    else if (k == "point") f.point = std::string(v), g.point = true;
    else f.attempt = parse_attempt(entry, v);
  }
  return g;
}

// The checks of one parsed entry that depend on its kind.
void check_entry(std::string_view entry, std::string_view kind_text, const FaultSpec& f, const Given& g) {
  if (g.seg) MS_CHECK(!f.seg.empty(), "MEGASCALE_FAULT entry '{}': seg is empty", entry);
  if (f.kind == "selfcheck") {
    MS_CHECK(g.host && f.host >= 0, "MEGASCALE_FAULT entry '{}': selfcheck needs host=H (>= 0)", entry);
    return;
  }
  if (f.kind == "ckpt") {
    MS_CHECK(g.point, "MEGASCALE_FAULT entry '{}': ckpt needs point=P", entry);
    MS_CHECK(known_ckpt_point(f.point), "MEGASCALE_FAULT entry '{}': unknown point '{}' ({})", entry, f.point,
             fmt::join(kCkptPoints, ", "));
    MS_CHECK(!g.rank || f.rank >= 0, "MEGASCALE_FAULT entry '{}': rank={} is not >= 0", entry, f.rank);
    MS_CHECK(!g.step || f.step >= 0, "MEGASCALE_FAULT entry '{}': step={} is not >= 0", entry, f.step);
    return;
  }
  MS_CHECK(f.rank >= 0, "MEGASCALE_FAULT entry '{}': rank=R (>= 0) is required", entry);
  if (f.kind == "slow")
    MS_CHECK(!f.seg.empty() && f.ratio > 0 && f.ratio <= 100, "MEGASCALE_FAULT entry '{}': slow needs seg=NAME and "
             "ratio in (0, 100]", entry);
  else
    MS_CHECK(g.step && f.step >= 1, "MEGASCALE_FAULT entry '{}': {} needs step=N (>= 1)", entry, kind_text);
  if (f.kind == "sleep")
    MS_CHECK(f.seconds > 0 && f.seconds <= 86400, "MEGASCALE_FAULT entry '{}': sleep needs seconds in (0, 86400]", entry);
  if (f.kind == "exit")
    MS_CHECK(f.code >= 0 && f.code <= 255, "MEGASCALE_FAULT entry '{}': code={} is not in [0, 255]", entry, f.code);
}

}  // namespace

std::vector<FaultSpec> parse_faults(std::string_view text) {
  std::vector<FaultSpec> out;
  for (std::string_view entry : split(text, ';')) {
    entry = trim(entry);
    if (entry.empty()) continue;
    std::vector<std::string_view> parts = split(entry, ':');
    for (std::string_view& p : parts) p = trim(p);
    FaultSpec f;
    f.kind = std::string(parts[0]);
    if (f.kind == "stop") f.kind = "hang";
    MS_CHECK(f.kind == "slow" || f.kind == "sleep" || f.kind == "crash" || f.kind == "hang" || f.kind == "nan" ||
                 f.kind == "exit" || f.kind == "selfcheck" || f.kind == "ckpt",
             "MEGASCALE_FAULT entry '{}': unknown kind '{}' (slow, sleep, crash, hang, stop, nan, exit, selfcheck, "
             "ckpt)", entry, parts[0]);
    const Given g = parse_fields(entry, parts, f);
    check_entry(entry, parts[0], f, g);
    out.push_back(f);
  }
  return out;
}

std::vector<FaultSpec> env_faults() {
  const char* env = std::getenv("MEGASCALE_FAULT");
  if (!env || !*env) return {};
  return parse_faults(env);
}

void init_faults(int rank) {
  auto a = std::make_unique<Active>();
  a->rank = rank;
  a->attempt = restart_attempt();
  for (const FaultSpec& f : env_faults())
    if (f.kind != "selfcheck" && f.kind != "ckpt" && f.rank == rank && attempt_applies(f.attempt, a->attempt))
      a->faults.push_back(f);
  a->fired = std::make_unique<std::atomic<bool>[]>(a->faults.size());
  bool slow = false, span = false;
  for (const FaultSpec& f : a->faults) {
    slow |= f.kind == "slow";
    span |= (f.kind == "crash" || f.kind == "hang") && !f.seg.empty();
  }
  // Never freed: a span on another thread may still read the previous set.
  static std::vector<std::unique_ptr<Active>>* kept = new std::vector<std::unique_ptr<Active>>();
  g_active.store(a.get(), std::memory_order_release);
  kept->push_back(std::move(a));
  g_slow_reported.store(-1);
  g_slow.store(slow, std::memory_order_release);
  g_span.store(span, std::memory_order_release);
  set_span_hooks({span ? &span_start_hook : nullptr, slow ? &span_end_hook : nullptr});
}

bool slow_faults_set() { return g_slow.load(std::memory_order_acquire); }
bool span_faults_set() { return g_span.load(std::memory_order_acquire); }

void fault_at_step_start(int step) {
  Active* a = active();
  if (!a) return;
  for (size_t i = 0; i < a->faults.size(); i++) {
    const FaultSpec& f = a->faults[i];
    if (f.step != step || !f.seg.empty() || f.kind == "slow" || f.kind == "nan") continue;
    if (a->fired[i].exchange(true)) continue;
    if (f.kind == "sleep") {
      announce_fault(fmt::format("sleep {:.1f} s", f.seconds), where(a->rank, step, {}), a->attempt);
      std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
    } else {
      act(f, *a, step, {});
    }
  }
}

bool fault_nan_loss(int step) {
  Active* a = active();
  if (!a) return false;
  bool nan = false;
  for (size_t i = 0; i < a->faults.size(); i++) {
    const FaultSpec& f = a->faults[i];
    if (f.kind != "nan" || f.step != step) continue;
    if (!a->fired[i].exchange(true))
      announce_fault("nan (the local loss becomes NaN)", where(a->rank, step, {}), a->attempt);
    nan = true;
  }
  return nan;
}

bool fault_fails_selfcheck(int host_index) {
  const std::vector<FaultSpec> faults = env_faults();
  if (faults.empty()) return false;
  const int attempt = restart_attempt();
  for (const FaultSpec& f : faults)
    if (f.kind == "selfcheck" && f.host == host_index && attempt_applies(f.attempt, attempt)) {
      announce_fault("selfcheck (the self-check fails)", fmt::format("on host {}", host_index), attempt);
      return true;
    }
  return false;
}

namespace {

// A span (or collective) of segment `seg` begins in the trace sink's current step: crash / hang
// faults with that seg and step act (once each).
void span_start_hook(std::string_view seg) {
  Active* a = active();
  if (!a) return;
  const int step = TraceSink::get().step();
  for (size_t i = 0; i < a->faults.size(); i++) {
    const FaultSpec& f = a->faults[i];
    if (f.seg.empty() || f.step != step || f.seg != seg || (f.kind != "crash" && f.kind != "hang")) continue;
    if (a->fired[i].exchange(true)) continue;
    act(f, *a, step, seg);
  }
}

// Burns cpu_ns of this thread's CPU time (busy work).
void slow_down(int64_t cpu_ns) {
  // Spins on `pause`: the thread holds its CPU for the time (as a slower processor would) while
  // leaving the execution units to a sibling hardware thread, so the fault slows this rank only.
  const int64_t until = thread_cpu_ns() + cpu_ns;
  while (thread_cpu_ns() < until)
    for (int i = 0; i < 64; i++) __builtin_ia32_pause();
}

// The extra time a span of segment `seg` that took `ns` must take now (0 = none): slow faults.
int64_t extra_ns(std::string_view seg, int64_t ns) {
  Active* a = active();
  if (!a) return 0;
  const int step = TraceSink::get().step();
  for (const FaultSpec& f : a->faults) {
    if (f.kind != "slow" || f.seg != seg || step < f.from) continue;
    if (g_slow_reported.exchange(step) < f.from)  // once, when it first applies
      announce_fault(fmt::format("slow (every {} span does {:.0f}% more work from step {})", f.seg, f.ratio * 100,
                           std::max(step, f.from)),
               where(a->rank, step, f.seg), a->attempt);
    return static_cast<int64_t>(static_cast<double>(ns) * f.ratio);
  }
  return 0;
}


// A compute span of segment `seg` that used cpu_ns ends: an injected straggler's span does more work.
void span_end_hook(std::string_view seg, int64_t cpu_ns) {
  const int64_t extra = extra_ns(seg, cpu_ns);
  if (extra > 0) slow_down(extra);
}

}  // namespace

}  // namespace ms
