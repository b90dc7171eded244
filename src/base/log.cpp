// log.cpp: see log.h.
#include "base/log.h"

#include <cstdlib>  // std::getenv

#include <spdlog/sinks/stdout_sinks.h>

namespace ms {

spdlog::logger& logger() {
  static spdlog::logger* l = [] {
    auto* lg = new spdlog::logger("megascale", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    lg->set_pattern("megascale: %l: %v");
    if (const char* lvl = std::getenv("MEGASCALE_LOG_LEVEL"); lvl && *lvl) lg->set_level(spdlog::level::from_str(lvl));
    lg->flush_on(spdlog::level::trace);  // every line reaches the terminal or the launcher at once
    return lg;
  }();
  return *l;
}

}  // namespace ms
