// log.cpp: see log.h.
#include "base/log.h"

#include <cstdlib>  // std::getenv

#include <spdlog/sinks/stdout_sinks.h>

namespace ms {

namespace {

std::shared_ptr<spdlog::logger> make_stderr_logger(const std::string& name, const std::string& pattern) {
  auto l = std::make_shared<spdlog::logger>(name, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  l->set_pattern(pattern);
  l->flush_on(spdlog::level::trace);  // every line reaches the terminal or the launcher at once
  return l;
}

}  // namespace

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> l = [] {
    auto lg = make_stderr_logger("megascale", "megascale: %l: %v");
    if (const char* lvl = std::getenv("MEGASCALE_LOG_LEVEL"); lvl && *lvl) lg->set_level(spdlog::level::from_str(lvl));
    return lg;
  }();
  return *l;
}

std::shared_ptr<spdlog::logger> make_named_logger(const std::string& name) { return make_stderr_logger(name, "%n: %v"); }

}  // namespace ms
