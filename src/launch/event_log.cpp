// event_log: see event_log.h.
#include "launch/event_log.h"

#include <unistd.h>  // fsync, fileno

#include <cerrno>
#include <cstring>

namespace ms::launch {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

EventLog::EventLog(const std::string& path) : path_(path), start_(std::chrono::steady_clock::now()) {
  if (!path_.empty()) {
    file_ = std::fopen(path_.c_str(), "ae");
    if (!file_) {
      std::fprintf(stderr, "megascale launch: cannot open the event log %s: %s\n", path_.c_str(), std::strerror(errno));
      failed_ = true;
    }
  }
}

EventLog::~EventLog() {
  if (file_) std::fclose(file_);
}

double EventLog::mono_now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

nlohmann::json EventLog::log(const std::string& name, nlohmann::json fields) {
  nlohmann::json j = {{"event", name}, {"t", unix_seconds()}, {"mono", mono_now()}};
  if (fields.is_object())
    for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = it.value();
  std::lock_guard lk(mu_);
  events_.push_back(j);
  if (file_) {
    const std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
      if (!failed_) std::fprintf(stderr, "megascale launch: cannot write the event log %s: %s\n", path_.c_str(),
                                 std::strerror(errno));
      failed_ = true;
    }
  }
  return j;
}

nlohmann::json EventLog::all() const {
  std::lock_guard lk(mu_);
  return events_;
}

}  // namespace ms::launch
