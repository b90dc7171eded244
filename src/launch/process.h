// process: the process primitives the launcher is built from (launch-internal).
// spawn() starts a program (fork + execve) with an explicit environment and chosen
// stdin/stdout/stderr, optionally in a process group of its own and/or bound to die with its parent
// (PR_SET_PDEATHSIG(SIGKILL)), with the signal mask cleared and every signal this process catches
// (and INT, TERM, HUP, CHLD, PIPE, even when ignored) back at its default; it throws an ms::Error
// naming the program when it cannot start (the child's errno comes back through a CLOEXEC pipe).
// describe_status() turns a wait status into the words the launcher reports ("rank 2 exited with
// code 1", "rank 1 killed by signal 9 (Killed)"), and status_code() into a shell-style exit code
// (128 + signal). process_alive() tells a live process from a zombie or a pid reused by another
// program.
#pragma once
#include <sys/types.h>  // pid_t

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ms::launch {

struct SpawnOptions {
  // The child's stdin/stdout/stderr, dup2'ed in this order (0, 1, 2); -1: inherit ours.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // setpgid(0, 0) in the child before exec: it leads a process group of its own (pgid == pid),
  // already in place when spawn() returns.
  bool new_group = false;
  // PR_SET_PDEATHSIG(SIGKILL) in the child before exec (then it checks that its parent is still
  // this process, else it exits 127 without running the program). Linux sends the signal when the
  // THREAD that called spawn() ends, not only when the process does: call spawn() from a thread
  // that lives as long as the child should (e.g. the main thread). Not inherited by the program's
  // own children (a process group kill or the Janitor handles those).
  bool die_with_parent = false;
};

// Starts argv with env (NAME=value strings); argv[0] without a '/' is looked up in PATH
// (find_program), as execvp would, before fork. Safe in a
// process with threads (only async-signal-safe calls between fork and exec). Returns the child's
// pid once it has exec'ed; throws ms::Error "cannot start <argv[0]>: <strerror>" when fork, the
// child's setup or execve fails (the failed child is reaped).
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const SpawnOptions& opt = {});

// Legacy form: spawn(argv, env, {stdin_fd, stdout_fd, stderr_fd, new_group}).
inline pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int stdin_fd,
                   int stdout_fd, int stderr_fd, bool new_group) {
  return spawn(argv, env, SpawnOptions{stdin_fd, stdout_fd, stderr_fd, new_group, false});
}

// name itself when it holds a '/'; else the first executable regular file <dir>/name for the dirs
// of env's PATH (this process's PATH when env has none; an empty entry is "."). Throws ms::Error
// "cannot start <name>: no such program in PATH (<PATH>)" when there is none.
std::string find_program(const std::string& name, const std::vector<std::string>& env);

// waitpid(pid, 0) retried on EINTR; returns the wait status (throws when waitpid fails).
int wait_for(pid_t pid, std::string_view what);
// The wait status of child pid if it has ended, WITHOUT reaping it (waitid WNOWAIT): until it is
// reaped (wait_for), its pid and process group id cannot be reused, so kill(-pid, ...) still reaches
// only what it left behind. nullopt while it runs; throws when waitid fails (not a child of ours).
std::optional<int> peek_exit(pid_t pid);

// "<who> exited with code 3", "<who> killed by signal 9 (Killed)", "<who> ended with wait status N".
std::string describe_status(std::string_view who, int status);
// 0..255 for an exit, 128 + signal for a death by signal, 1 otherwise.
int status_code(int status);

// True while pid names a live (not zombie) process whose command name starts like `comm` (any
// command when comm is empty).
bool process_alive(pid_t pid, const std::string& comm);

// This process's environment as NAME=value strings.
std::vector<std::string> current_environment();
// Sets NAME=value in env, replacing any NAME=... already there.
void set_env(std::vector<std::string>& env, const std::string& name, const std::string& value);

}  // namespace ms::launch
