// process: see process.h.
#include "launch/process.h"

#include <fcntl.h>      // O_CLOEXEC, fcntl
#include <pthread.h>    // pthread_sigmask
#include <signal.h>     // sigset_t, sigaction, SIGINT, ...
#include <sys/prctl.h>  // prctl, PR_SET_PDEATHSIG
#include <sys/stat.h>   // stat, S_ISREG
#include <sys/wait.h>   // waitpid, WIFEXITED, ...
#include <unistd.h>     // fork, execve, pipe2, setpgid, dup2, getppid

#include <algorithm>
#include <cerrno>
#include <cstdlib>  // getenv
#include <cstring>  // sigdescr_np
#include <fstream>

#include <fmt/format.h>

#include "base/check.h"

extern char** environ;

namespace ms::launch {

namespace {

// Everything below runs in the child between fork and exec: async-signal-safe calls only (no
// allocation, no locks, no errno-dependent library state beyond errno itself).
[[noreturn]] void child_fail(int err_fd, int err) {
  ssize_t w;
  do w = ::write(err_fd, &err, sizeof err); while (w < 0 && errno == EINTR);
  ::_exit(127);
}

[[noreturn]] void child_exec(const char* path, char* const* argv, char* const* envp, const SpawnOptions& opt,
                             pid_t parent, int err_fd) {
  // Keep the error pipe off 0..2 (a parent with closed stdio may have got it there).
  if (err_fd <= 2) {
    const int moved = ::fcntl(err_fd, F_DUPFD_CLOEXEC, 3);
    if (moved < 0) ::_exit(127);
    err_fd = moved;
  }
  if (opt.new_group && ::setpgid(0, 0) != 0) child_fail(err_fd, errno);
  if (opt.die_with_parent) {
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(err_fd, errno);
    if (::getppid() != parent) ::_exit(127);  // the parent died before the signal was armed
  }
  const int from[3] = {opt.stdin_fd, opt.stdout_fd, opt.stderr_fd};
  for (int target = 0; target < 3; target++) {
    const int fd = from[target];
    if (fd < 0) continue;
    if (fd == target) {
      if (::fcntl(fd, F_SETFD, 0) != 0) child_fail(err_fd, errno);  // keep it across exec
    } else if (::dup2(fd, target) < 0) {
      child_fail(err_fd, errno);
    }
  }
  // Handlers point into the parent's code: back to the default (exec would do that too, but a
  // signal may arrive before it); the launcher's own signals even when ignored (SIGPIPE).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction cur {};
    if (::sigaction(sig, nullptr, &cur) != 0) continue;  // glibc-internal signals refuse: fine
    const bool launcher_sig =
        sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGCHLD || sig == SIGPIPE;
    if (launcher_sig || (cur.sa_handler != SIG_DFL && cur.sa_handler != SIG_IGN)) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(path, argv, envp);
  child_fail(err_fd, errno);
}

}  // namespace

std::string find_program(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  MS_CHECK(!name.empty(), "cannot start a program with an empty name");
  std::string path;
  bool have_path = false;
  for (const auto& e : env)
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5), have_path = true;
  if (!have_path) {
    const char* ours = std::getenv("PATH");
    path = ours ? ours : "/usr/local/bin:/usr/bin:/bin";
  }
  size_t from = 0;
  for (;;) {
    const size_t colon = path.find(':', from);
    const std::string dir = path.substr(from, colon == std::string::npos ? std::string::npos : colon - from);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  MS_FAIL("cannot start {}: no such program in PATH ({})", name, path);
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const SpawnOptions& opt) {
  MS_CHECK(!argv.empty(), "spawn: empty argv");
  // Everything the child needs is built before fork, the program's path included.
  const std::string path = find_program(argv[0], env);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  int ep[2];
  MS_SYSCHECK(::pipe2(ep, O_CLOEXEC) == 0, "cannot start {}: pipe2", argv[0]);
  const pid_t parent = ::getpid();
  // No handler of ours may run in the child before it resets them: block everything over fork.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) child_exec(path.c_str(), cargv.data(), cenv.data(), opt, parent, ep[1]);
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(ep[1]);
  if (pid < 0) {
    ::close(ep[0]);
    errno = fork_errno;
    MS_SYSCHECK(false, "cannot start {}: fork", argv[0]);
  }
  // EOF: the child exec'ed (the pipe is CLOEXEC); an int: its errno before that.
  int child_errno = 0;
  ssize_t n;
  do n = ::read(ep[0], &child_errno, sizeof child_errno); while (n < 0 && errno == EINTR);
  ::close(ep[0]);
  if (n != 0) {
    int st;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    errno = n == (ssize_t)sizeof child_errno ? child_errno : EIO;
    MS_SYSCHECK(false, "cannot start {}", argv[0]);
  }
  return pid;
}

int wait_for(pid_t pid, std::string_view what) {
  int st = 0;
  pid_t w;
  do w = ::waitpid(pid, &st, 0); while (w < 0 && errno == EINTR);
  MS_SYSCHECK(w == pid, "waitpid {}", what);
  return st;
}

std::optional<int> peek_exit(pid_t pid) {
  siginfo_t si{};
  int rc;
  do rc = ::waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT); while (rc < 0 && errno == EINTR);
  MS_SYSCHECK(rc == 0, "waitid {}", pid);
  if (si.si_pid != pid) return std::nullopt;
  // The wait status waitpid would report (the kernel's encoding, which WIFEXITED & co. decode).
  switch (si.si_code) {
    case CLD_EXITED: return (si.si_status & 0xff) << 8;
    case CLD_KILLED: return si.si_status & 0x7f;
    case CLD_DUMPED: return (si.si_status & 0x7f) | 0x80;
    default: return std::nullopt;  // stopped / continued: not reported without WSTOPPED/WCONTINUED
  }
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
