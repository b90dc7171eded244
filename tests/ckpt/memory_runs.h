// memory_runs: what the in-memory recovery tests share (test_memory_recovery, test_slow_memory_recovery):
// driver_runs.h's job (2 layers, dp = 4 on 2 emulated hosts x 2 ranks, 16 steps, a storage
// checkpoint every 4) with in-memory checkpoints every step, its uninterrupted run (storage path:
// memory snapshots must not change a single bit of training), the host-loss action (SIGKILL of a
// host's executor and ranks, which takes its memory folder with it: the executor's janitor is gone
// too, the driver removes the folder when it excludes the host) and the checks after a recovery.
#pragma once
#include <signal.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "launch/driver_runs.h"

namespace ms::testing {

inline const std::vector<std::string> kMemoryEveryStep = {"--checkpoint.memory_every=1"};

inline DriverJob& memory_job() {
  static DriverJob job("memory_recovery");
  return job;
}

// The uninterrupted run (storage path), once per test binary.
inline const DriverRun& memory_baseline() {
  static DriverRun base = [] {
    DriverRun r = memory_job().run("base", "localhost*2", 2);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.losses.size(), static_cast<size_t>(DriverJob::kSteps)) << r.output;
    return r;
  }();
  return base;
}

// Waits until the log of run `name` holds `text` (limit 120 s); false if it never did.
inline bool wait_for_log(DriverJob& job, const std::string& name, const std::string& text) {
  const auto t0 = Clock::now();
  while (seconds_since(t0) < 120) {
    if (slurp(job.dir() + "/" + name + "/log.jsonl").find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits until rank 0 of run `name` logged `step`.
inline bool wait_for_step(DriverJob& job, const std::string& name, int step) {
  return wait_for_log(job, name, "\"step\":" + std::to_string(step) + ",");
}

// Waits until run `name` published its storage checkpoint of `step` or a later one (its `latest`
// file names it; the save is asynchronous and rank 0 logs it only after its next step) (limit 120 s).
inline bool wait_for_published(DriverJob& job, const std::string& name, int step) {
  const auto t0 = Clock::now();
  const std::string want = fmt::format("step-{:08d}", step);
  while (seconds_since(t0) < 120) {
    std::string latest = slurp(job.dir() + "/" + name + "/checkpoints/latest");
    if (latest.size() >= want.size() && latest.substr(0, want.size()) >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A lost host: SIGKILL to the executor of host `host` and to every rank it started, at once.
inline void kill_host(DriverJob& job, const std::string& name, int host) {
  const std::vector<int> execs = job.processes(name, "--host-index " + std::to_string(host) + " ");
  std::vector<int> victims;
  for (int pid : execs) victims.push_back(pid);
  for (int pid : job.processes(name, " train "))
    if (slurp("/proc/" + std::to_string(pid) + "/environ").find("MEGASCALE_HOST_INDEX=" + std::to_string(host) +
                                                                 std::string(1, '\0')) != std::string::npos)
      victims.push_back(pid);
  ASSERT_GE(victims.size(), 2u) << "host " << host << " of " << name << ": executor and ranks not found";
  for (int pid : victims) ::kill(pid, SIGKILL);
}

// The job finished, every execution of every step has the uninterrupted run's loss (bit for bit), each
// recovery restored from `paths[i]` ("memory" / "storage") with at most `max_repeated` steps run
// again, and nothing of the job is left (processes, run folders, memory folders under /dev/shm).
// `baseline`: the uninterrupted run of the same layout (memory_baseline() when not given).
inline void expect_memory_recovered(DriverJob& job, const std::string& name, const DriverRun& r,
                                    const std::vector<std::string>& paths, int max_repeated,
                                    const DriverRun* baseline = nullptr) {
  const DriverRun& base = baseline ? *baseline : memory_baseline();
  ASSERT_EQ(r.code, 0) << r.output;
  ASSERT_EQ(r.losses.size(), base.losses.size()) << r.output;
  for (const auto& [step, loss] : base.losses)
    for (double l : r.all_losses.at(step)) EXPECT_EQ(l, loss) << name << " step " << step;
  const auto recoveries = r.of("recovery"), resumed = r.of("resumed");
  ASSERT_EQ(recoveries.size(), paths.size()) << r.output;
  ASSERT_EQ(resumed.size(), paths.size()) << r.output;
  for (size_t i = 0; i < paths.size(); i++) {
    EXPECT_EQ(recoveries[i].value("path", ""), paths[i]) << recoveries[i].dump();
    EXPECT_EQ(recoveries[i].value("ranks", 0), 4) << recoveries[i].dump();
    EXPECT_LE(resumed[i].value("steps_repeated", 99), max_repeated) << resumed[i].dump();
    std::printf("%s: recovery %zu from %s (local %d, peer %d, storage %d) in %.3f s; resumed %.2f s after the "
                "fault was detected; %d step(s) repeated\n",
                name.c_str(), i + 1, recoveries[i].value("path", "?").c_str(), recoveries[i].value("memory_local", -1),
                recoveries[i].value("memory_peer", -1), recoveries[i].value("storage", -1),
                recoveries[i].value("restore_s", -1.0), resumed[i].value("recovery_s", -1.0),
                resumed[i].value("steps_repeated", -1));
  }
  job.expect_clean_slate(name);
}

}  // namespace ms::testing
