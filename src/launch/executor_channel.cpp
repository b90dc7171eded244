// executor_channel: see executor_channel.h.
#include "launch/executor_channel.h"

#include <fcntl.h>     // fcntl, O_NONBLOCK
#include <signal.h>    // kill
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // pipe2, close

#include <cerrno>
#include <chrono>

#include "base/check.h"
#include "launch/janitor.h"
#include "launch/output_queue.h"
#include "launch/process.h"

namespace ms::launch {

void ExecutorChannel::start(const std::vector<std::string>& argv, Janitor& janitor) {
  int in[2], out[2], err[2];
  MS_SYSCHECK(::pipe2(in, O_CLOEXEC) == 0 && ::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "pipe2");
  try {
    pid_ = spawn(argv, current_environment(), SpawnOptions{in[0], out[1], err[1], true, true});
    janitor.watch_group(pid_);
  } catch (...) {
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
    throw;
  }
  ::close(in[0]), ::close(out[1]), ::close(err[1]);
  to_fd_ = in[1], from_fd_ = out[0], err_fd_ = err[0];
  MS_SYSCHECK(::fcntl(from_fd_, F_SETFL, O_NONBLOCK) == 0 && ::fcntl(err_fd_, F_SETFL, O_NONBLOCK) == 0, "fcntl");
  alive_ = true;
}

void ExecutorChannel::end(bool now, OutputQueue& err) {
  if (pid_ <= 0) return;
  if (to_fd_ >= 0) {
    if (!now) send({{"cmd", "exit"}});
    ::close(to_fd_);
    to_fd_ = -1;
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + (now ? std::chrono::milliseconds(0) : std::chrono::milliseconds(5000));
  int st = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid_, &st, WNOHANG);
    if (w == pid_ || (w < 0 && errno != EINTR)) break;
    if (Clock::now() >= deadline) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &st, 0);
      break;
    }
    ::usleep(10000);
  }
  ::kill(-pid_, SIGKILL);  // anything left in its group
  pid_ = -1;
  if (from_fd_ >= 0) ::close(from_fd_), from_fd_ = -1;
  if (err_fd_ >= 0) {  // its last words
    err_reader_.read_from(err_fd_);
    for (std::string line; err_reader_.next(line);) err.push_line(line);
    ::close(err_fd_), err_fd_ = -1;
  }
  alive_ = false;
}

void ExecutorChannel::send(const nlohmann::json& msg) {
  if (to_fd_ < 0) return;
  if (!send_message(to_fd_, msg)) alive_ = false;
}

std::vector<int> ExecutorChannel::read_fds() const {
  std::vector<int> fds;
  for (int fd : {from_fd_, err_fd_})
    if (fd >= 0) fds.push_back(fd);
  return fds;
}

bool ExecutorChannel::read(int fd, OutputQueue& err, std::vector<std::string>& reports) {
  if (fd < 0) return false;
  if (fd == err_fd_) {  // the executor's stderr (its ranks' stderr lines): dropped when not read
    const bool open = err_reader_.read_from(err_fd_);
    for (std::string line; err_reader_.next(line);) err.push_line(line);
    if (!open) ::close(err_fd_), err_fd_ = -1;
    return false;
  }
  if (fd != from_fd_) return false;
  const bool open = reader_.read_from(from_fd_);
  for (std::string line; reader_.next(line);) reports.push_back(line);
  if (open) return false;
  ::close(from_fd_);
  from_fd_ = -1;
  alive_ = false;
  return true;
}

}  // namespace ms::launch
