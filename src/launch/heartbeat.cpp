// heartbeat: see heartbeat.h.
#include "launch/heartbeat.h"

#include <poll.h>    // poll
#include <unistd.h>  // read, write

#include <cerrno>

#include "base/check.h"

namespace ms::launch {

using nlohmann::json;

namespace {

// A number that may be NaN: null in JSON (which has no NaN).
json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }
double num_of(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}
template <class T>
void get(const json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it != j.end() && !it->is_null()) out = it->get<T>();
}

}  // namespace

void to_json(json& j, const RankBeat& b) {
  j = {{"rank", b.rank}, {"pid", b.pid}, {"state", b.state}, {"exit_code", b.exit_code}, {"signal", b.signal},
       {"step", b.step}, {"loss", num(b.loss)}, {"tokens_per_s", num(b.tokens_per_s)},
       {"step_ms", num(b.step_ms)}, {"ms", b.ms}};
}
void from_json(const json& j, RankBeat& b) {
  get(j, "rank", b.rank), get(j, "pid", b.pid), get(j, "state", b.state), get(j, "exit_code", b.exit_code);
  get(j, "signal", b.signal), get(j, "step", b.step), get(j, "ms", b.ms);
  b.loss = num_of(j, "loss"), b.tokens_per_s = num_of(j, "tokens_per_s"), b.step_ms = num_of(j, "step_ms");
}
void to_json(json& j, const StepBeat& b) {
  j = {{"rank", b.rank}, {"step", b.step}, {"loss", num(b.loss)}, {"step_ms", b.step_ms}};
}
void from_json(const json& j, StepBeat& b) {
  get(j, "rank", b.rank), get(j, "step", b.step), get(j, "step_ms", b.step_ms);
  b.loss = num_of(j, "loss");
}
void to_json(json& j, const LogLineBeat& b) { j = {{"rank", b.rank}, {"level", b.level}, {"text", b.text}}; }
void from_json(const json& j, LogLineBeat& b) { get(j, "rank", b.rank), get(j, "level", b.level), get(j, "text", b.text); }

void to_json(json& j, const HostBeat& b) {
  j = {{"type", "beat"},       {"host", b.host},         {"seq", b.seq},
       {"attempt", b.attempt}, {"state", b.state},       {"hostname", b.hostname},
       {"pid", b.pid},         {"ranks", b.ranks},       {"steps", b.steps},
       {"bytes_sent", b.bytes_sent}, {"bytes_recv", b.bytes_recv}, {"lines", b.lines},
       {"out_dir", b.out_dir}, {"error", b.error}};
}
void from_json(const json& j, HostBeat& b) {
  get(j, "host", b.host), get(j, "seq", b.seq), get(j, "attempt", b.attempt), get(j, "state", b.state);
  get(j, "hostname", b.hostname), get(j, "pid", b.pid), get(j, "ranks", b.ranks), get(j, "steps", b.steps);
  get(j, "bytes_sent", b.bytes_sent), get(j, "bytes_recv", b.bytes_recv), get(j, "lines", b.lines);
  get(j, "out_dir", b.out_dir), get(j, "error", b.error);
}

void to_json(json& j, const RunCommand& c) {
  j = {{"cmd", "run"}, {"attempt", c.attempt}, {"world", c.world}, {"ranks", c.ranks},
       {"argv", c.argv}, {"env", c.env}, {"quiet", c.quiet}};
}
void from_json(const json& j, RunCommand& c) {
  get(j, "attempt", c.attempt), get(j, "world", c.world), get(j, "ranks", c.ranks), get(j, "argv", c.argv);
  get(j, "env", c.env), get(j, "quiet", c.quiet);
}
void to_json(json& j, const SelfCheckProc& c) { j = {{"argv", c.argv}, {"env", c.env}}; }
void from_json(const json& j, SelfCheckProc& c) { get(j, "argv", c.argv), get(j, "env", c.env); }
void to_json(json& j, const SelfCheckCommand& c) {
  j = {{"cmd", "selfcheck"}, {"id", c.id}, {"procs", c.procs}, {"timeout_ms", c.timeout_ms}};
}
void from_json(const json& j, SelfCheckCommand& c) {
  get(j, "id", c.id), get(j, "procs", c.procs), get(j, "timeout_ms", c.timeout_ms);
}
void to_json(json& j, const SelfCheckResult& r) { j = {{"exit_code", r.exit_code}, {"result", r.result}}; }
void from_json(const json& j, SelfCheckResult& r) {
  get(j, "exit_code", r.exit_code);
  if (auto it = j.find("result"); it != j.end()) r.result = *it;
}
void to_json(json& j, const SelfCheckReport& r) {
  j = {{"type", "selfcheck"}, {"host", r.host}, {"id", r.id}, {"results", r.results}};
}
void from_json(const json& j, SelfCheckReport& r) { get(j, "host", r.host), get(j, "id", r.id), get(j, "results", r.results); }

bool LineReader::read_from(int fd) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      buf_.append(buf, (size_t)n);
      continue;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

bool LineReader::next(std::string& line) {
  const size_t nl = buf_.find('\n', start_);
  if (nl == std::string::npos) {
    buf_.erase(0, start_);
    start_ = 0;
    return false;
  }
  line.assign(buf_, start_, nl - start_);
  start_ = nl + 1;
  return true;
}

json parse_message(std::string_view line, std::string_view who) {
  json j = json::parse(line, nullptr, false);
  MS_CHECK(!j.is_discarded() && j.is_object(), "{} sent a line that is not a JSON message: '{}'", who,
           line.substr(0, 200));
  return j;
}

std::string encode_message(const json& msg) { return msg.dump(-1, ' ', false, json::error_handler_t::replace); }

bool send_message(int fd, const json& msg) {
  const std::string s = encode_message(msg) + "\n";
  const char* p = s.data();
  size_t n = s.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w > 0) {
      p += w, n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EPIPE) return false;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      ::poll(&pf, 1, 1000);
      continue;
    }
    MS_SYSCHECK(false, "write to the control channel");
  }
  return true;
}

}  // namespace ms::launch
