// store_spec: see store_spec.h.
#include "launch/store_spec.h"

#include "base/check.h"

namespace ms::launch {

std::string StoreSpec::name() const {
  switch (kind) {
    case StoreKind::kAuto: return "auto";
    case StoreKind::kFile: return "file";
    case StoreKind::kRedis: return "redis";
    case StoreKind::kRedisAt: return url;
  }
  return url;
}

StoreSpec parse_store_spec(const std::string& text) {
  if (text == "auto") return {StoreKind::kAuto, ""};
  if (text == "file") return {StoreKind::kFile, ""};
  if (text == "redis") return {StoreKind::kRedis, ""};
  if (text.rfind("redis://", 0) == 0 && text.size() > 8) return {StoreKind::kRedisAt, text};
  MS_FAIL("--store: unknown store '{}': use auto, file, redis or redis://host:port", text);
}

StoreSpec resolve_store(const StoreSpec& s, bool all_local) {
  if (s.kind != StoreKind::kAuto) return s;
  return {all_local ? StoreKind::kFile : StoreKind::kRedis, ""};
}

}  // namespace ms::launch
