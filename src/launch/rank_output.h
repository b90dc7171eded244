// rank_output: forwarding of the ranks' output, line by line (launch-internal).
// A RankStream is the read end of one rank's stdout or stderr pipe. pump() reads what is available
// without blocking and writes every complete line to the launcher's own stdout or stderr prefixed
// "[rank k] ". Only whole lines are written, one rank's at a time, so lines of different ranks never
// mix.
// The unfinished tail is kept until its newline arrives; at end of file, or when it exceeds 64 KiB,
// it is written as a line of its own (a newline added). A stream with keep == false is read and
// dropped (--quiet-others). A reader of the launcher's output that went away (EPIPE) drops the
// output rather than failing the launch; a non-blocking output fd is waited on (poll) when full.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/process.h"  // SpawnOptions

namespace ms::launch {

struct RankStream {
  int fd = -1;        // read end of the rank's pipe, non-blocking; -1 once at end of file (closed)
  int out_fd = 1;     // where its lines go (1 or 2)
  bool keep = true;   // forward (false: read and drop)
  std::string partial;  // the unfinished last line
  // Called with every complete line (without its newline), kept or not: the executor's log-pattern
  // matching and its forwarding of rank stdout to the driver.
  std::function<void(std::string_view line)> on_line;
};

// Starts argv (process.h spawn with `opt`) with its stdout and stderr on fresh pipes whose read ends,
// non-blocking and close-on-exec, become out.fd and err.fd (opt's stdout_fd / stderr_fd are replaced).
// Returns the pid; when the start fails it throws with nothing left open.
pid_t spawn_with_streams(const std::vector<std::string>& argv, const std::vector<std::string>& env, SpawnOptions opt,
                         RankStream& out, RankStream& err);

// Reads what is available on s.fd and forwards the complete lines; closes s.fd (and sets it to -1)
// at end of file, after forwarding the unfinished tail.
void pump(RankStream& s, int rank);

// Writes all n bytes to fd (retrying on EINTR, polling on EAGAIN); EPIPE or EIO (a hung-up
// terminal) drops the rest silently.
// Throws ms::Error on any other error.
void write_all(int fd, const char* p, size_t n);

}  // namespace ms::launch
