// ckpt_fault.cpp: see ckpt_fault.h.
#include "ckpt/ckpt_fault.h"

#include <signal.h>  // raise, SIGKILL

#include <chrono>
#include <cstdlib>  // std::getenv
#include <thread>
#include <sstream>
#include <string>

#include "base/check.h"  // MS_FAIL

namespace ms {

bool ckpt_fault_point(const char* point, int rank, int step) {
  const char* env = std::getenv("MEGASCALE_CKPT_FAULT");
  if (!env || !*env) return false;
  std::stringstream all(env);
  std::string spec;
  while (std::getline(all, spec, ',')) {
    if (spec != point && !spec.starts_with(std::string(point) + ":")) continue;
    int r = -1, s = -1;
    std::stringstream fields(spec);
    std::string f;
    std::getline(fields, f, ':');
    while (std::getline(fields, f, ':')) {
      if (f.starts_with("rank=")) r = std::stoi(f.substr(5));
      else if (f.starts_with("step=")) s = std::stoi(f.substr(5));
    }
    if ((r >= 0 && r != rank) || (s >= 0 && s != step)) continue;
    const std::string p = point;
    if (p == "write_error") MS_FAIL("injected write error (MEGASCALE_CKPT_FAULT={})", spec);
    if (p == "nan_state") return true;
    if (p == "slow_write" || p == "slow_copy") {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      return true;
    }
    ::raise(SIGKILL);
  }
  return false;
}

}  // namespace ms
