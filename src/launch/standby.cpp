// standby.cpp: see standby.h.
#include "launch/standby.h"

#include <fcntl.h>   // open
#include <unistd.h>  // read, dup2, close

#include <cerrno>
#include <cstdlib>  // setenv, unsetenv, getenv, _Exit
#include <cstdio>   // fflush

#include <nlohmann/json.hpp>

#include "base/check.h"

namespace ms::launch {

std::string encode_standby_assignment(const std::map<std::string, std::string>& env) {
  return nlohmann::json(env).dump() + "\n";
}

bool await_standby_assignment() {
  const char* flag = std::getenv(kStandbyEnv);
  if (flag == nullptr || *flag == '\0') return false;
  // One line, read a byte at a time: nothing past it is consumed (there is nothing past it).
  std::string line;
  for (;;) {
    char c = 0;
    const ssize_t n = ::read(0, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    MS_SYSCHECK(n >= 0, "read of the standby assignment on stdin");
    if (n == 0) {
      if (line.empty()) {  // not needed: leave without a trace (no output, no files)
        std::fflush(nullptr);
        std::_Exit(0);
      }
      break;
    }
    if (c == '\n') break;
    line.push_back(c);
    MS_CHECK(line.size() <= (1u << 20), "standby assignment: longer than 1 MiB without a newline");
  }
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  MS_CHECK(!j.is_discarded() && j.is_object(), "standby assignment: not a JSON object: '{}'", line.substr(0, 200));
  for (const auto& [k, v] : j.items()) {
    MS_CHECK(v.is_string() && !k.empty() && k.find('=') == std::string::npos,
             "standby assignment: '{}' is not NAME: \"value\"", k);
    MS_SYSCHECK(::setenv(k.c_str(), v.get<std::string>().c_str(), 1) == 0, "setenv");
  }
  ::unsetenv(kStandbyEnv);
  const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  MS_SYSCHECK(null >= 0, "open /dev/null");
  MS_SYSCHECK(::dup2(null, 0) == 0, "dup2 /dev/null onto stdin");
  ::close(null);
  return true;
}

}  // namespace ms::launch
