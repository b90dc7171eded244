// rank_output: see rank_output.h.
#include "launch/rank_output.h"

#include <fcntl.h>   // O_CLOEXEC, O_NONBLOCK, fcntl
#include <poll.h>    // poll
#include <unistd.h>  // read, write, close

#include <cerrno>

#include <fmt/format.h>

#include "base/check.h"

namespace ms::launch {

namespace {

void forward(RankStream& s, int rank, const char* data, size_t n, bool eof) {
  if (!s.keep && !s.on_line) return;
  s.partial.append(data, n);
  const std::string prefix = fmt::format("[rank {}] ", rank);
  std::string lines;
  size_t start = 0, nl;
  while ((nl = s.partial.find('\n', start)) != std::string::npos) {
    if (s.on_line) s.on_line(std::string_view(s.partial).substr(start, nl - start));
    if (s.keep) {
      lines += prefix;
      lines.append(s.partial, start, nl + 1 - start);
    }
    start = nl + 1;
  }
  s.partial.erase(0, start);
  // A very long line or the end of the stream: flush what there is as a line of its own.
  if ((eof && !s.partial.empty()) || s.partial.size() > (1u << 16)) {
    if (s.on_line) s.on_line(s.partial);
    if (s.keep) lines += prefix + s.partial + "\n";
    s.partial.clear();
  }
  if (!lines.empty()) write_all(s.out_fd, lines.data(), lines.size());
}

}  // namespace

pid_t spawn_with_streams(const std::vector<std::string>& argv, const std::vector<std::string>& env, SpawnOptions opt,
                         RankStream& out, RankStream& err) {
  int o[2], e[2];
  MS_SYSCHECK(::pipe2(o, O_CLOEXEC) == 0, "pipe2");
  if (::pipe2(e, O_CLOEXEC) != 0) {
    const int saved = errno;
    ::close(o[0]), ::close(o[1]);
    errno = saved;
    MS_SYSCHECK(false, "pipe2");
  }
  opt.stdout_fd = o[1], opt.stderr_fd = e[1];
  pid_t pid = -1;
  try {
    pid = spawn(argv, env, opt);
  } catch (...) {
    for (int fd : {o[0], o[1], e[0], e[1]}) ::close(fd);
    throw;
  }
  ::close(o[1]), ::close(e[1]);
  out.fd = o[0], err.fd = e[0];
  for (int fd : {out.fd, err.fd}) MS_SYSCHECK(::fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "fcntl O_NONBLOCK");
  return pid;
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, 100);
      continue;
    }
    // Nobody reads our output any more (a closed pipe, or EIO: the terminal of the launch closed):
    // drop it; the launcher goes on stopping the ranks cleanly.
    if (w < 0 && (errno == EPIPE || errno == EIO)) return;
    MS_SYSCHECK(w >= 0, "write to fd {}", fd);
    p += w;
    n -= (size_t)w;
  }
}

void pump(RankStream& s, int rank) {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) {  // end of file (or a read error, treated as the end)
      forward(s, rank, nullptr, 0, true);
      ::close(s.fd);
      s.fd = -1;
      return;
    }
    forward(s, rank, buf, (size_t)n, false);
    if ((size_t)n < sizeof buf) return;
  }
}

}  // namespace ms::launch
