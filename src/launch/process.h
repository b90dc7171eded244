// process: the process primitives the launcher is built from (launch-internal).
// spawn() starts a program with posix_spawn, an explicit environment and chosen stdin/stdout/stderr,
// optionally in a process group of its own, with the signal mask cleared and the signals the
// launcher handles (INT, TERM, HUP, CHLD, PIPE) back at their defaults; it throws an ms::Error
// naming the program when it cannot start. describe_status() turns a wait status into the words the
// launcher reports ("rank 2 exited with code 1", "rank 1 killed by signal 9 (Killed)"), and
// status_code() into a shell-style exit code (128 + signal). process_alive() tells a live process
// from a zombie or a pid reused by another program.
#pragma once
#include <sys/types.h>  // pid_t

#include <string>
#include <string_view>
#include <vector>

namespace ms::launch {

// posix_spawn of argv (argv[0] is a path) with env; stdin/stdout/stderr from the given fds (-1:
// inherit), in a new process group when new_group.
pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, int stdin_fd, int stdout_fd,
            int stderr_fd, bool new_group);

// waitpid(pid, 0) retried on EINTR; returns the wait status (throws when waitpid fails).
int wait_for(pid_t pid, std::string_view what);

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
