// redis_ping.cpp: see redis_ping.h.
#include "base/redis_ping.h"

#include <sys/time.h>  // timeval

#include <hiredis/hiredis.h>

#include <memory>
#include <string_view>

namespace ms {

namespace {

timeval to_timeval(std::chrono::milliseconds t) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(t.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((t.count() % 1000) * 1000);
  return tv;
}

struct ContextFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};

// One command whose status or string reply must be `expect`; fills `out` when it is not.
bool command_expecting(redisContext* c, const char* name, const char* expect, redisReply* reply, RedisPing& out) {
  std::unique_ptr<redisReply, ReplyFree> r(reply);
  out.command = name;
  if (!r) {
    out.result = RedisPing::Result::kNoAnswer;
    out.reason = c->errstr[0] ? c->errstr : "no reply";
    return false;
  }
  const std::string text(r->str ? r->str : "", r->str ? r->len : 0);
  if ((r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) && text == expect) return true;
  out.result = RedisPing::Result::kRefused;
  out.reason = text;
  return false;
}

}  // namespace

RedisPing redis_ping(const std::string& host, int port, const std::string& password, std::chrono::milliseconds timeout) {
  RedisPing out;
  const timeval tv = to_timeval(timeout);
  std::unique_ptr<redisContext, ContextFree> c(redisConnectWithTimeout(host.c_str(), port, tv));
  if (!c) return {RedisPing::Result::kNoConnection, "", "cannot allocate a redis context"};
  if (c->err) {
    // hiredis reports a failed getaddrinfo as REDIS_ERR_OTHER (and, with the same code, "Can't
    // create socket: ..." when every address failed, which is worth retrying).
    const bool unresolvable =
        c->err == REDIS_ERR_OTHER && std::string_view(c->errstr).rfind("Can't create socket", 0) != 0;
    return {unresolvable ? RedisPing::Result::kUnresolvable : RedisPing::Result::kNoConnection, "", c->errstr};
  }
  if (redisSetTimeout(c.get(), tv) != REDIS_OK)
    return {RedisPing::Result::kNoAnswer, "", c->errstr[0] ? c->errstr : "cannot set the timeout"};
  if (!password.empty() &&
      !command_expecting(c.get(), "AUTH", "OK", static_cast<redisReply*>(redisCommand(c.get(), "AUTH %s", password.c_str())), out))
    return out;
  if (!command_expecting(c.get(), "PING", "PONG", static_cast<redisReply*>(redisCommand(c.get(), "PING")), out)) return out;
  return {};
}

}  // namespace ms
