// process: see process.h.
#include "launch/process.h"

#include <signal.h>    // sigset_t, SIGINT, ...
#include <spawn.h>     // posix_spawn
#include <sys/wait.h>  // waitpid, WIFEXITED, ...

#include <algorithm>
#include <cerrno>
#include <cstring>  // sigdescr_np
#include <fstream>

#include <fmt/format.h>

#include "base/check.h"

extern char** environ;

namespace ms::launch {

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int stdin_fd, int stdout_fd,
            int stderr_fd, bool new_group) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  int rc = posix_spawn_file_actions_init(&fa);
  errno = rc;
  MS_SYSCHECK(rc == 0, "posix_spawn_file_actions_init");
  rc = posix_spawnattr_init(&at);
  errno = rc;
  MS_SYSCHECK(rc == 0, "posix_spawnattr_init");
  if (stdin_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdin_fd, 0);
  if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stdout_fd, 1);
  if (stderr_fd >= 0) posix_spawn_file_actions_adddup2(&fa, stderr_fd, 2);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&defaults, s);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (new_group) flags |= POSIX_SPAWN_SETPGROUP;
  posix_spawnattr_setflags(&at, flags);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &defaults);
  posix_spawnattr_setpgroup(&at, 0);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid = -1;
  rc = posix_spawn(&pid, cargv[0], &fa, &at, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  errno = rc;
  MS_SYSCHECK(rc == 0, "cannot start {}", argv[0]);
  return pid;
}

int wait_for(pid_t pid, std::string_view what) {
  int st = 0;
  pid_t w;
  do w = ::waitpid(pid, &st, 0); while (w < 0 && errno == EINTR);
  MS_SYSCHECK(w == pid, "waitpid {}", what);
  return st;
}

std::string describe_status(std::string_view who, int status) {
  if (WIFEXITED(status)) return fmt::format("{} exited with code {}", who, WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("{} killed by signal {} ({})", who, sig, sigdescr_np(sig) ? sigdescr_np(sig) : "?");
  }
  return fmt::format("{} ended with wait status {}", who, status);
}

int status_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

bool process_alive(pid_t pid, const std::string& comm) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!f || !std::getline(f, stat)) return false;
  const size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= stat.size()) return false;
  if (!comm.empty() && stat.substr(open + 1, close - open - 1).rfind(comm.substr(0, 15), 0) != 0) return false;
  return stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; e++) env.emplace_back(*e);
  return env;
}

void set_env(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  const std::string key = name + "=";
  env.erase(std::remove_if(env.begin(), env.end(), [&](const std::string& e) { return e.rfind(key, 0) == 0; }),
            env.end());
  env.push_back(key + value);
}

}  // namespace ms::launch
