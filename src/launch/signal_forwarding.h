// signal_forwarding: how the launcher hears signals and passes them on (launch-internal).
// SignalPipe installs handlers for SIGINT, SIGTERM and SIGHUP (to be forwarded to the ranks) and
// SIGCHLD (a rank ended) that only write the signal number to a non-blocking self-pipe, so the
// launcher's poll loop wakes up and handles them outside signal context; SIGPIPE is ignored (a
// reader of our output that went away must not kill the launcher before it stops the ranks). The
// previous dispositions are restored on destruction. One SignalPipe may exist at a time.
// signal_groups() sends a signal to whole process groups (each rank leads its own), so a rank's
// children (a shell's sleep, a tool's workers) get it too.
#pragma once
#include <signal.h>     // struct sigaction
#include <sys/types.h>  // pid_t

#include <array>
#include <vector>

namespace ms::launch {

class SignalPipe {
 public:
  SignalPipe();   // throws ms::Error when the pipe or a handler cannot be set up
  ~SignalPipe();  // restores the previous handlers
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // Readable when a signal arrived (poll it).
  int fd() const { return read_fd_; }
  // Signals received since the last call, in arrival order (SIGCHLD left out: it only wakes).
  std::vector<int> drain();

 private:
  static constexpr std::array<int, 5> kSignals = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE};
  int read_fd_ = -1, write_fd_ = -1;
  std::array<struct sigaction, 5> old_{};
};

// kill(-leader, sig) for every leader > 0: the whole process group of each.
void signal_groups(const std::vector<pid_t>& group_leaders, int sig);

// A signal's description ("Interrupt", "Killed"), "?" when the system has none.
const char* signal_description(int sig);

}  // namespace ms::launch
