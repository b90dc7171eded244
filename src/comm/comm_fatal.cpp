// comm_fatal.cpp: see comm_fatal.h.
#include "comm/comm_fatal.h"

#include <unistd.h>  // _exit

#include <atomic>
#include <cstdio>

namespace ms {
namespace {
std::atomic<CommFailureHandler> g_handler{nullptr};
std::atomic<void (*)(int)> g_abort{nullptr};
std::atomic<int64_t> g_timeout_ms{0};
}  // namespace

void set_comm_failure_handler(CommFailureHandler h) { g_handler.store(h); }

bool comm_failure_fatal() { return g_handler.load() != nullptr; }

void report_comm_failure(const std::string& what) {
  if (CommFailureHandler h = g_handler.load()) {
    h(what);
    end_process_now(86);  // a handler that returned anyway
  }
}

void end_process_now(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (void (*abort_fn)(int) = g_abort.load()) abort_fn(code);
  _exit(code);
}

namespace detail {

void set_process_abort(void (*abort_fn)(int code)) { g_abort.store(abort_fn); }

void note_comm_timeout(std::chrono::milliseconds t) {
  int64_t cur = g_timeout_ms.load();
  while (t.count() > cur && !g_timeout_ms.compare_exchange_weak(cur, t.count())) {
  }
}

std::chrono::milliseconds comm_timeout() {
  const int64_t t = g_timeout_ms.load();
  return std::chrono::milliseconds(t > 0 ? t : 300000);
}

}  // namespace detail
}  // namespace ms
