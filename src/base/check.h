// check: the project's error type and checked-call macros.
// Every failure that reaches a user is an ms::Error whose message names where it happened
// (file:line) and, for input problems, the file, field and reason. Binaries catch ms::Error at the
// top, print it and exit non-zero. Nothing here aborts silently.
#pragma once
#include <cerrno>     // errno
#include <cstring>    // strerror
#include <stdexcept>  // std::runtime_error
#include <string>

#include <fmt/format.h>  // fmt::format

namespace ms {

// A user-facing error: bad input, failed syscall, failed library call.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ms

// MS_CHECK(cond, "fmt {}", args...): throws ms::Error("file:line: message") when cond is false.
#define MS_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond))                                                                         \
      throw ::ms::Error(::fmt::format("{}:{}: {}", __FILE__, __LINE__, ::fmt::format(__VA_ARGS__))); \
  } while (0)

// MS_FAIL("fmt {}", args...): unconditional ms::Error with file:line.
#define MS_FAIL(...) \
  throw ::ms::Error(::fmt::format("{}:{}: {}", __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)))

// MS_SYSCHECK(expr, "what"): for syscalls returning -1 / nullptr on failure; appends strerror(errno).
#define MS_SYSCHECK(ok, ...)                                                             \
  do {                                                                                   \
    if (!(ok)) {                                                                         \
      int ms_errno_ = errno;                                                             \
      throw ::ms::Error(::fmt::format("{}:{}: {}: {}", __FILE__, __LINE__,              \
                                      ::fmt::format(__VA_ARGS__), std::strerror(ms_errno_))); \
    }                                                                                    \
  } while (0)
