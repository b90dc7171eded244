// signal_forwarding: see signal_forwarding.h.
#include "launch/signal_forwarding.h"

#include <fcntl.h>   // O_CLOEXEC, O_NONBLOCK
#include <unistd.h>  // pipe2, read, write, close

#include <atomic>
#include <cerrno>
#include <cstring>  // sigdescr_np

#include "base/check.h"

namespace ms::launch {

namespace {

std::atomic<int> g_signal_pipe{-1};

extern "C" void on_signal(int sig) {
  const int saved = errno;
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    unsigned char b = (unsigned char)sig;
    [[maybe_unused]] ssize_t r = ::write(fd, &b, 1);
  }
  errno = saved;
}

}  // namespace

SignalPipe::SignalPipe() {
  int fds[2];
  MS_SYSCHECK(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2");
  read_fd_ = fds[0];
  write_fd_ = fds[1];
  g_signal_pipe.store(write_fd_);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < kSignals.size(); i++) {
    struct sigaction use = sa;
    if (kSignals[i] == SIGPIPE) use.sa_handler = SIG_IGN;
    if (kSignals[i] == SIGCHLD) use.sa_flags |= SA_NOCLDSTOP;
    MS_SYSCHECK(::sigaction(kSignals[i], &use, &old_[i]) == 0, "sigaction");
  }
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < kSignals.size(); i++) ::sigaction(kSignals[i], &old_[i], nullptr);
  g_signal_pipe.store(-1);
  ::close(read_fd_);
  ::close(write_fd_);
}

std::vector<int> SignalPipe::drain() {
  std::vector<int> sigs;
  unsigned char buf[64];
  ssize_t n;
  while ((n = ::read(read_fd_, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; i++)
      if (buf[i] != SIGCHLD) sigs.push_back(buf[i]);
  return sigs;
}

void signal_groups(const std::vector<pid_t>& group_leaders, int sig) {
  for (pid_t pid : group_leaders)
    if (pid > 0) ::kill(-pid, sig);
}

const char* signal_description(int sig) { return sigdescr_np(sig) ? sigdescr_np(sig) : "?"; }

}  // namespace ms::launch
