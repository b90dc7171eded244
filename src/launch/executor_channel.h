// executor_channel: the driver's end of one host's executor (launch-internal; driver.h): the
// process, started from a full argv (already wrapped by the host launcher) in a process group of
// its own that the janitor watches; its control channel (stdin: one JSON command a line), its
// reports (stdout: one JSON a line) and its stderr (its ranks' stderr lines).
// Guarantees: the pipes are close-on-exec and the read ends non-blocking (reading never blocks the
// driver's loop); send() never throws on a closed channel (it marks the executor not alive);
// end() leaves no process of its group, closes every pipe and passes its last stderr lines on.
// A plain value: the driver ends it (end) before it goes.
#pragma once
#include <sys/types.h>  // pid_t

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/heartbeat.h"  // LineReader

namespace ms::launch {

class Janitor;
class OutputQueue;

class ExecutorChannel {
 public:
  // Starts `argv` with this process's environment. Throws ms::Error when it cannot.
  void start(const std::vector<std::string>& argv, Janitor& janitor);
  // `exit` on its channel and up to 5 s to go (now: at once), then SIGKILL to its group.
  void end(bool now, OutputQueue& err);
  void send(const nlohmann::json& msg);
  // Running, and its channel open.
  bool alive() const { return alive_; }
  // The read ends to poll (reports, stderr), those still open.
  std::vector<int> read_fds() const;
  // Reads what is ready on `fd` (one of read_fds): stderr lines go to err, report lines are
  // appended to `reports`. Returns true when the report channel closed now (the executor is gone).
  bool read(int fd, OutputQueue& err, std::vector<std::string>& reports);

 private:
  pid_t pid_ = -1;  // the executor (leader of its process group)
  int to_fd_ = -1, from_fd_ = -1, err_fd_ = -1;  // its stdin, stdout (reports) and stderr
  LineReader reader_, err_reader_;
  bool alive_ = false;
};

}  // namespace ms::launch
