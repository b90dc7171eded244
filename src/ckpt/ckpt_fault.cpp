// ckpt_fault.cpp: see ckpt_fault.h.
#include "ckpt/ckpt_fault.h"

#include <signal.h>  // raise, SIGKILL

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>  // std::getenv
#include <thread>

#include <fmt/format.h>

#include "base/check.h"             // MS_CHECK, MS_FAIL
#include "base/log.h"               // logger
#include "obs/fault_injection.h"    // restart_attempt, parse_attempt, attempt_applies
#include "obs/run_recorder.h"       // record_event, flush_active_recorder

namespace ms {
namespace {

constexpr std::string_view kPoints[] = {"slow_copy", "stage1",      "nan_state",      "slow_write",
                                        "mid_file",  "write_error", "before_publish", "before_latest"};

int field_number(std::string_view entry, std::string_view key, std::string_view v) {
  int x = -1;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
  MS_CHECK(!v.empty() && r.ec == std::errc() && r.ptr == v.data() + v.size() && x >= 0,
           "MEGASCALE_CKPT_FAULT entry '{}': {}='{}' is not a number >= 0", entry, key, v);
  return x;
}

}  // namespace

std::vector<CkptFaultSpec> parse_ckpt_faults(std::string_view text) {
  std::vector<CkptFaultSpec> out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t e = text.find(',', at);
    if (e == std::string_view::npos) e = text.size();
    const std::string_view entry = text.substr(at, e - at);
    at = e + 1;
    if (entry.empty()) continue;
    CkptFaultSpec f;
    size_t p = entry.find(':');
    f.point = std::string(entry.substr(0, p));
    bool known = false;
    for (std::string_view k : kPoints) known |= f.point == k;
    MS_CHECK(known, "MEGASCALE_CKPT_FAULT entry '{}': unknown point '{}' (slow_copy, stage1, nan_state, slow_write, "
             "mid_file, write_error, before_publish, before_latest)", entry, f.point);
    while (p != std::string_view::npos) {
      const size_t next = entry.find(':', p + 1);
      const std::string_view field = entry.substr(p + 1, next == std::string_view::npos ? std::string_view::npos
                                                                                      : next - p - 1);
      p = next;
      const size_t eq = field.find('=');
      MS_CHECK(eq != std::string_view::npos, "MEGASCALE_CKPT_FAULT entry '{}': '{}' is not key=value", entry, field);
      const std::string_view k = field.substr(0, eq), v = field.substr(eq + 1);
      if (k == "rank") f.rank = field_number(entry, k, v);
      else if (k == "step") f.step = field_number(entry, k, v);
      else if (k == "attempt") f.attempt = parse_attempt("MEGASCALE_CKPT_FAULT", entry, v);
      else MS_FAIL("MEGASCALE_CKPT_FAULT entry '{}': unknown field '{}' (rank, step, attempt)", entry, k);
    }
    out.push_back(f);
  }
  return out;
}

void check_ckpt_fault_env() {
  const char* env = std::getenv("MEGASCALE_CKPT_FAULT");
  if (!env || !*env) return;
  parse_ckpt_faults(env);
  restart_attempt();
}

bool ckpt_fault_point(const char* point, int rank, int step) {
  const char* env = std::getenv("MEGASCALE_CKPT_FAULT");
  if (!env || !*env) return false;
  const int attempt = restart_attempt();
  for (const CkptFaultSpec& f : parse_ckpt_faults(env)) {
    if (f.point != point || (f.rank >= 0 && f.rank != rank) || (f.step >= 0 && f.step != step) ||
        !attempt_applies(f.attempt, attempt))
      continue;
    const std::string p = point;
    const int64_t unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch()).count();
    const std::string what =
        fmt::format("checkpoint {} at rank {} step {} (attempt {}; unix_ns {})", p, rank, step, attempt, unix_ns);
    logger().warn("fault injected (MEGASCALE_CKPT_FAULT): {}", what);
    record_event("fault injected", what);
    if (p == "write_error") MS_FAIL("injected write error (MEGASCALE_CKPT_FAULT) at rank {} step {}", rank, step);
    if (p == "nan_state") return true;
    if (p == "slow_write" || p == "slow_copy") {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      return true;
    }
    flush_active_recorder();
    ::raise(SIGKILL);
  }
  return false;
}

}  // namespace ms
