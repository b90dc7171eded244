// ckpt_fault.cpp: see ckpt_fault.h.
#include "ckpt/ckpt_fault.h"

#include <signal.h>  // raise, SIGKILL

#include <chrono>
#include <cstdlib>  // std::getenv
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/check.h"           // MS_CHECK, MS_FAIL
#include "obs/fault_injection.h"  // env_faults, restart_attempt, attempt_applies, announce_fault (flushes)

namespace ms {

void check_ckpt_fault_env() {
  const char* retired = std::getenv("MEGASCALE_CKPT_FAULT");
  MS_CHECK(!retired || !*retired, "MEGASCALE_CKPT_FAULT='{}' is no longer read: checkpoint faults are MEGASCALE_FAULT "
           "entries ckpt:point=P[:rank=R][:step=N][:attempt=K|all] (docs/observability.md)", retired ? retired : "");
  env_faults();
  restart_attempt();
}

bool ckpt_fault_point(const char* point, int rank, int step) {
  const std::vector<FaultSpec> faults = env_faults();
  if (faults.empty()) return false;
  const int attempt = restart_attempt();
  const std::string_view p = point;
  for (const FaultSpec& f : faults) {
    if (f.kind != "ckpt" || f.point != p || (f.rank >= 0 && f.rank != rank) || (f.step >= 0 && f.step != step) ||
        !attempt_applies(f.attempt, attempt))
      continue;
    announce_fault(fmt::format("checkpoint {}", p), fmt::format("at rank {} step {}", rank, step), attempt);
    if (p == "write_error") MS_FAIL("injected write error (MEGASCALE_FAULT ckpt) at rank {} step {}", rank, step);
    if (p == "nan_state" || p == "mem_flip") return true;
    if (p == "slow_write" || p == "slow_copy" || p == "slow_send") {
      std::this_thread::sleep_for(std::chrono::seconds(p == "slow_send" ? 3 : 1));
      return true;
    }
    ::raise(SIGKILL);  // announce_fault flushed the records
  }
  return false;
}

}  // namespace ms
