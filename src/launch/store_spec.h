// store_spec: the rendezvous store a launch asks for (`--store`), parsed once where the command line
// is read, so that the launcher, the driver and the job store compare a kind, never the flag's text.
//   auto                (driver mode's default) file when every host is this machine, else redis
//   file                a private folder
//   redis               a redis-server the launch starts (loopback, random password)
//   redis://host:port   an existing server, used as given
// Guarantees: parse_store_spec accepts exactly these spellings and names the flag and the value in
// its error; name() spells a spec back as the flag did (the event log's "store").
#pragma once
#include <string>

namespace ms::launch {

enum class StoreKind { kAuto, kFile, kRedis, kRedisAt };

struct StoreSpec {
  StoreKind kind = StoreKind::kAuto;
  std::string url;  // kRedisAt: "redis://host:port" as given; else empty
  std::string name() const;  // "auto", "file", "redis" or the url
};

// `--store`'s value. Throws ms::Error "--store: unknown store 'X': use auto, file, redis or redis://host:port".
StoreSpec parse_store_spec(const std::string& text);
// auto made concrete: file when every host is local, else redis; any other kind as it is.
StoreSpec resolve_store(const StoreSpec& s, bool all_local);

}  // namespace ms::launch
