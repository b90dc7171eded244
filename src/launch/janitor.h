// janitor: cleans up after a process that can no longer do it itself (launch-internal).
// A Janitor starts a small guardian process, `<exe> janitor` (the hidden subcommand that calls
// janitor_main()), connected to its owner by a socket (its stdin). The owner registers the process
// groups to kill and the paths to remove as it creates them. When the owner goes away without
// releasing it — it exited, threw past the Janitor, or was SIGKILLed: the socket reaches end of file,
// or the janitor's parent is no longer the owner — the janitor SIGKILLs every registered process
// group, waits (up to 3 s) until they are gone, removes every registered path (rm -rf, symlinks not
// followed) and exits. release() (and the destructor) tell it to exit without acting: the owner
// cleans up itself on a normal end.
// Safety: the janitor runs in a process group of its own, ignores SIGINT/SIGTERM/SIGHUP/SIGQUIT/
// SIGPIPE and the terminal stop signals (a Ctrl-C, or a kill of the owner's process group, does not
// take it down before it cleans), holds no inherited descriptor but its stdin and stderr, never
// signals a pgid <= 1 or its own, and only removes absolute paths that were registered and are not
// "/". It writes one line to stderr when it acted ("megascale janitor: ...").
// The owner's side is not meant for several threads at once (calls are serialized by a mutex, but
// the janitor should be started from the thread that lives longest; see spawn()).
#pragma once
#include <sys/types.h>  // pid_t

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace ms::launch {

class Janitor {
 public:
  // Starts the janitor process, `command` (the application's way to reach janitor_main, e.g.
  // {"/proc/self/exe", "janitor"}: this very binary, even if its file was replaced), and waits (up
  // to 10 s) for its greeting. Throws ms::Error when it cannot start or does not greet (a program
  // that is not a janitor is killed).
  explicit Janitor(const std::vector<std::string>& command);
  ~Janitor() { release(); }
  Janitor(const Janitor&) = delete;
  Janitor& operator=(const Janitor&) = delete;

  // Kill process group pgid (> 1) if the owner dies / stop doing so. Throw ms::Error when the
  // janitor is gone (or after release()).
  void watch_group(pid_t pgid);
  void forget_group(pid_t pgid);
  // Remove path (made absolute against the current folder; no newline) if the owner dies / stop doing
  // so. Same errors.
  void watch_path(const std::filesystem::path& path);
  void forget_path(const std::filesystem::path& path);

  // Tells the janitor to exit without acting and reaps it (SIGKILL if it has not exited within 5 s).
  // Idempotent; never throws.
  void release() noexcept;

  // The janitor's pid (-1 after release()).
  pid_t pid() const { return pid_; }

 private:
  void send(const std::string& line);
  std::mutex mu_;
  int fd_ = -1;
  pid_t pid_ = -1;
};

// The janitor process (the application's hidden subcommand that Janitor's command starts). Talks
// to its owner on stdin (a socket); returns the exit code. Wire it before any other argument
// parsing, e.g. `if (argc == 2 && argv[1] == kJanitorCommand) return ms::launch::janitor_main();`.
int janitor_main();

}  // namespace ms::launch
