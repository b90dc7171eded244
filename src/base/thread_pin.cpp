// thread_pin.cpp: see thread_pin.h.
#include "base/thread_pin.h"

#include <omp.h>
#include <sched.h>  // sched_getaffinity, sched_setaffinity, cpu_set_t

#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "base/check.h"

namespace ms {

namespace {

struct Original {
  std::once_flag once;
  cpu_set_t set;
};

Original& original() {
  static Original o;
  std::call_once(o.once, [&] {
    CPU_ZERO(&o.set);
    MS_SYSCHECK(sched_getaffinity(0, sizeof(o.set), &o.set) == 0, "sched_getaffinity");
  });
  return o;
}

}  // namespace

std::string pin_omp_threads(int local_rank) {
  const cpu_set_t& allowed = original().set;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  MS_CHECK(!cpus.empty(), "pin_omp_threads: this process may run on no CPU");
  const int threads = omp_get_max_threads();
  std::vector<int> chosen(threads, -1);
  std::vector<int> ok(threads, 0);
#pragma omp parallel num_threads(threads)
  {
    const int i = omp_get_thread_num();
    const int cpu = cpus[(static_cast<size_t>(local_rank) * threads + i) % cpus.size()];
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    chosen[i] = cpu;
    ok[i] = sched_setaffinity(0, sizeof(one), &one) == 0;
  }
  for (int i = 0; i < threads; i++)
    MS_CHECK(ok[i], "pin_omp_threads: sched_setaffinity refused CPU {} for OpenMP thread {}", chosen[i], i);
  return fmt::format("OpenMP threads 0..{} pinned to CPUs {}", threads - 1, fmt::join(chosen, ","));
}

void restore_thread_affinity() {
  const cpu_set_t& set = original().set;
  MS_SYSCHECK(sched_setaffinity(0, sizeof(set), &set) == 0, "sched_setaffinity (restore)");
}

}  // namespace ms
