// processes: starting and reaping worker processes in multi-process tests (test_comm, the
// pipeline fault test): spawn with a cleaned launcher environment, output to a file; wait for all
// with a limit, killing (and failing the test for) what is left, so no test leaves a process behind.
#pragma once
#include <gtest/gtest.h>
#include <signal.h>    // kill
#include <spawn.h>     // posix_spawnp
#include <sys/wait.h>  // waitpid
#include <fcntl.h>     // O_WRONLY

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"  // slurp

extern char** environ;

namespace ms::testing {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Proc {
  pid_t pid = -1;
  std::string out_path;  // stdout and stderr
  bool done = false;
  int code = -1;    // exit code, or -signal
  double end_s = 0;  // seconds after start when it ended
  std::string output() const { return slurp(out_path); }
};

// Starts argv with the current environment minus launcher variables, plus `env`.
inline Proc spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
           const std::string& out_path) {
  std::vector<std::string> vars;
  for (char** e = environ; *e; e++) {
    const std::string kv = *e, key = kv.substr(0, kv.find('='));
    if (env.count(key) || key == "RANK" || key == "WORLD_SIZE" || key.rfind("MEGASCALE_", 0) == 0 ||
        key.rfind("OMPI_", 0) == 0 || key.rfind("PMIX_", 0) == 0)
      continue;
    vars.push_back(kv);
  }
  for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& v : vars) cenv.push_back(const_cast<char*>(v.c_str()));
  cenv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  Proc p;
  p.out_path = out_path;
  const int rc = posix_spawnp(&p.pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "cannot start " << argv[0];
  if (rc != 0) p.pid = -1, p.done = true;
  return p;
}

inline void reap(Proc& p, int status, Clock::time_point start) {
  p.done = true;
  p.code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? -WTERMSIG(status) : -1;
  p.end_s = seconds_since(start);
}

// Waits until every process ended or `limit` seconds passed; kills what is left (SIGTERM, then
// SIGKILL) and fails the test for it. `until`: stop waiting early when it returns true.
inline void wait_all(std::vector<Proc*> ps, Clock::time_point start, double limit,
              const std::function<bool()>& until = nullptr) {
  for (;;) {
    bool all = true;
    for (Proc* p : ps) {
      if (p->done) continue;
      int st = 0;
      if (waitpid(p->pid, &st, WNOHANG) == p->pid) reap(*p, st, start);
      else all = false;
    }
    if (all || (until && until())) return;
    if (seconds_since(start) > limit) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (Proc* p : ps) {
    if (p->done) continue;
    ADD_FAILURE() << "process " << p->pid << " still running after " << limit << " s; killing it. Output:\n"
                  << p->output();
    kill(p->pid, SIGTERM);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill(p->pid, SIGKILL);
    int st = 0;
    waitpid(p->pid, &st, 0);
    reap(*p, st, start);
  }
}

}  // namespace ms::testing
