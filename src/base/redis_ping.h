// redis_ping: is a Redis server answering at host:port? One hiredis connection with a timeout,
// AUTH when a password is given, then PING. Both the Gloo rendezvous probe (comm/) and the launcher's
// start-up check of its own redis-server (launch/) ask through here. Never throws; every command
// also times out after `timeout`.
#pragma once
#include <chrono>
#include <string>

namespace ms {

struct RedisPing {
  enum class Result {
    kOk,            // connected, AUTH (if any) accepted, PING answered PONG
    kNoConnection,  // nothing accepted the connection in time (worth retrying)
    kUnresolvable,  // the host name does not resolve
    kNoAnswer,      // connected, but a command got no reply (timeout, closed connection)
    kRefused,       // the server answered AUTH or PING with something else (e.g. NOAUTH)
  };
  Result result = Result::kOk;
  std::string command;  // kNoAnswer / kRefused: "AUTH" or "PING"
  std::string reason;   // hiredis's or the server's words ("Connection refused", "NOAUTH ...")
  bool ok() const { return result == Result::kOk; }
};

RedisPing redis_ping(const std::string& host, int port, const std::string& password, std::chrono::milliseconds timeout);

}  // namespace ms
