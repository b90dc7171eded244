// heartbeat: see heartbeat.h.
#include "launch/heartbeat.h"

#include <poll.h>    // poll
#include <unistd.h>  // read, write

#include <cerrno>
#include <cmath>  // NAN, std::isfinite

#include <fmt/format.h>

#include "base/check.h"
#include "base/json_fields.h"  // JsonFields

namespace ms::launch {

using nlohmann::json;

namespace {

// A number that may be NaN: null in JSON (which has no NaN).
json num(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// The fields of a message, every one optional (absent or null: the default): a wrong type is an
// ms::Error naming the message type and the field (base/json_fields.h).
JsonFields fields(const json& j, const char* type) {
  return JsonFields(j, fmt::format("heartbeat message ({})", type));
}

}  // namespace

void to_json(json& j, const RankBeat& b) {
  j = {{"rank", b.rank}, {"pid", b.pid}, {"state", b.state}, {"exit_code", b.exit_code}, {"signal", b.signal},
       {"step", b.step}, {"loss", num(b.loss)}, {"tokens_per_s", num(b.tokens_per_s)},
       {"step_ms", num(b.step_ms)}, {"ms", b.ms}, {"warm", b.warm}};
}
void from_json(const json& j, RankBeat& b) {
  const JsonFields f = fields(j, "RankBeat");
  f.read_or_keep("rank", b.rank);
  f.read_or_keep("pid", b.pid);
  f.read_or_keep("state", b.state);
  f.read_or_keep("exit_code", b.exit_code);
  f.read_or_keep("signal", b.signal);
  f.read_or_keep("step", b.step);
  f.read_or_keep("ms", b.ms);
  f.read_or_keep("warm", b.warm);
  b.loss = f.number_or("loss", NAN), b.tokens_per_s = f.number_or("tokens_per_s", NAN);
  b.step_ms = f.number_or("step_ms", NAN);
}
void to_json(json& j, const StepBeat& b) {
  j = {{"rank", b.rank}, {"step", b.step}, {"loss", num(b.loss)}, {"step_ms", b.step_ms}};
}
void from_json(const json& j, StepBeat& b) {
  const JsonFields f = fields(j, "StepBeat");
  f.read_or_keep("rank", b.rank);
  f.read_or_keep("step", b.step);
  f.read_or_keep("step_ms", b.step_ms);
  b.loss = f.number_or("loss", NAN);
}
void to_json(json& j, const LogLineBeat& b) { j = {{"rank", b.rank}, {"level", b.level}, {"text", b.text}}; }
void from_json(const json& j, LogLineBeat& b) {
  const JsonFields f = fields(j, "LogLineBeat");
  f.read_or_keep("rank", b.rank);
  f.read_or_keep("level", b.level);
  f.read_or_keep("text", b.text);
}

void to_json(json& j, const HostBeat& b) {
  j = {{"type", "beat"},       {"host", b.host},         {"seq", b.seq},
       {"attempt", b.attempt}, {"state", b.state},       {"hostname", b.hostname},
       {"pid", b.pid},         {"ranks", b.ranks},       {"steps", b.steps},
       {"bytes_sent", b.bytes_sent}, {"bytes_recv", b.bytes_recv}, {"lines", b.lines},
       {"out_dir", b.out_dir}, {"error", b.error}, {"standby", b.standby}};
}
void from_json(const json& j, HostBeat& b) {
  const JsonFields f = fields(j, "HostBeat");
  f.read_or_keep("host", b.host);
  f.read_or_keep("seq", b.seq);
  f.read_or_keep("attempt", b.attempt);
  f.read_or_keep("state", b.state);
  f.read_or_keep("hostname", b.hostname);
  f.read_or_keep("pid", b.pid);
  f.read_or_keep("ranks", b.ranks);
  f.read_or_keep("steps", b.steps);
  f.read_or_keep("bytes_sent", b.bytes_sent);
  f.read_or_keep("bytes_recv", b.bytes_recv);
  f.read_or_keep("lines", b.lines);
  f.read_or_keep("out_dir", b.out_dir);
  f.read_or_keep("error", b.error);
  f.read_or_keep("standby", b.standby);
}

void to_json(json& j, const RunCommand& c) {
  j = {{"cmd", "run"}, {"attempt", c.attempt}, {"world", c.world}, {"ranks", c.ranks},
       {"argv", c.argv}, {"env", c.env}, {"quiet", c.quiet}};
}
void from_json(const json& j, RunCommand& c) {
  const JsonFields f = fields(j, "RunCommand");
  f.read_or_keep("attempt", c.attempt);
  f.read_or_keep("world", c.world);
  f.read_or_keep("ranks", c.ranks);
  f.read_or_keep("argv", c.argv);
  f.read_or_keep("env", c.env);
  f.read_or_keep("quiet", c.quiet);
}
void to_json(json& j, const StandbyCommand& c) { j = {{"cmd", "standby"}, {"argv", c.argv}, {"count", c.count}}; }
void from_json(const json& j, StandbyCommand& c) {
  const JsonFields f = fields(j, "StandbyCommand");
  f.read_or_keep("argv", c.argv);
  f.read_or_keep("count", c.count);
}
void to_json(json& j, const SelfCheckProc& c) { j = {{"argv", c.argv}, {"env", c.env}}; }
void from_json(const json& j, SelfCheckProc& c) {
  const JsonFields f = fields(j, "SelfCheckProc");
  f.read_or_keep("argv", c.argv);
  f.read_or_keep("env", c.env);
}
void to_json(json& j, const SelfCheckCommand& c) {
  j = {{"cmd", "selfcheck"}, {"id", c.id}, {"procs", c.procs}, {"timeout_ms", c.timeout_ms}};
}
void from_json(const json& j, SelfCheckCommand& c) {
  const JsonFields f = fields(j, "SelfCheckCommand");
  f.read_or_keep("id", c.id);
  f.read_or_keep("procs", c.procs);
  f.read_or_keep("timeout_ms", c.timeout_ms);
}
void to_json(json& j, const SelfCheckResult& r) { j = {{"exit_code", r.exit_code}, {"result", r.result}}; }
void from_json(const json& j, SelfCheckResult& r) {
  const JsonFields f = fields(j, "SelfCheckResult");
  f.read_or_keep("exit_code", r.exit_code);
  if (const json* v = f.find("result")) r.result = *v;
}
void to_json(json& j, const SelfCheckReport& r) {
  j = {{"type", "selfcheck"}, {"host", r.host}, {"id", r.id}, {"results", r.results}};
}
void from_json(const json& j, SelfCheckReport& r) {
  const JsonFields f = fields(j, "SelfCheckReport");
  f.read_or_keep("host", r.host);
  f.read_or_keep("id", r.id);
  f.read_or_keep("results", r.results);
}

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
