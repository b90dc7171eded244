// job_store: see job_store.h.
#include "launch/job_store.h"

#include <sys/stat.h>  // mkdir, chmod

#include <cerrno>
#include <cstdlib>  // std::getenv
#include <cstring>  // strerror
#include <fstream>

#include <fmt/format.h>

#include "base/check.h"
#include "base/redis_ping.h"  // redis_ping
#include "launch/janitor.h"

namespace ms::launch {

namespace fs = std::filesystem;

namespace {
fs::path parent_or_tmp(const std::string& parent) {
  return parent.empty() ? fs::temp_directory_path() : fs::path(parent);
}
}  // namespace

fs::path make_private_dir(const fs::path& parent, const std::string& name, const char* what, Janitor& janitor) {
  const fs::path dir = fs::absolute(parent / name);
  std::error_code ec;
  fs::create_directories(fs::absolute(parent), ec);
  if (::mkdir(dir.c_str(), 0700) != 0) {
    const int e = errno;
    MS_FAIL("cannot create the {} folder {}: {}", what, dir.string(), std::strerror(e));
  }
  janitor.watch_path(dir);
  if (::chmod(dir.c_str(), 0700) != 0) {  // mkdir's mode is masked by the umask
    const int e = errno;
    fs::remove_all(dir, ec);
    MS_FAIL("cannot make the {} folder {} private (mode 0700): {}", what, dir.string(), std::strerror(e));
  }
  return dir;
}

PrivateDir::PrivateDir(const std::string& parent, const std::string& name, const char* what, Janitor& janitor)
    : janitor_(janitor), dir_(make_private_dir(parent_or_tmp(parent), name, what, janitor)) {}

PrivateDir::~PrivateDir() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  try {
    janitor_.forget_path(dir_);
  } catch (...) {
  }
}

JobStore::JobStore(const StoreSpec& spec, const std::string& parent, const std::string& tag, Janitor& janitor)
    : janitor_(janitor), spec_(spec) {
  if (spec.kind == StoreKind::kFile) {
    dir_ = make_private_dir(parent_or_tmp(parent), "store-" + tag, "store", janitor_);
    url_ = "file:" + dir_.string();
  } else if (spec.kind == StoreKind::kRedis) {
    dir_ = make_private_dir(parent_or_tmp(parent), "redis-" + tag, "redis", janitor_);
    try {
      redis_.emplace(dir_, &janitor_);
    } catch (...) {
      cleanup();
      throw;
    }
    url_ = redis_->url();
    password_ = redis_->password();
  } else if (spec.kind == StoreKind::kRedisAt) {
    url_ = spec.url;
    if (const char* p = std::getenv("MEGASCALE_STORE_PASSWORD"); p && *p) {
      password_ = p;
    } else if (const char* f = std::getenv("MEGASCALE_STORE_PASSWORD_FILE"); f && *f) {
      std::ifstream in(f);
      MS_CHECK(in && std::getline(in, password_), "cannot read the store password from {} (MEGASCALE_STORE_PASSWORD_FILE)", f);
    }
  } else {
    MS_FAIL("store '{}' is not resolved: resolve_store gives file or redis", spec.name());
  }
}

void JobStore::cleanup() noexcept {
  redis_.reset();  // stops the server before its folder goes
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    try {
      janitor_.forget_path(dir_);
    } catch (...) {
    }
    dir_.clear();
  }
}

std::string JobStore::heal(bool ping) {
  using std::chrono::milliseconds;
  if (spec_.kind == StoreKind::kFile) {
    std::error_code ec;
    if (fs::is_directory(dir_, ec)) return "";
    MS_CHECK(::mkdir(dir_.c_str(), 0700) == 0 && ::chmod(dir_.c_str(), 0700) == 0,
             "rendezvous store unreachable: its folder {} went and cannot be made again: {}", dir_.string(),
             std::strerror(errno));
    return fmt::format("the file store's folder {} went; made again", dir_.string());
  }
  if (spec_.kind == StoreKind::kRedis) {
    std::optional<std::string> why = redis_ ? redis_->exited() : std::string("redis-server is not running");
    if (!why && ping) why = redis_->ping_error(milliseconds(2000));
    if (!why) return "";
    redis_.reset();
    try {
      redis_.emplace(dir_, &janitor_);
    } catch (const std::exception& e) {
      MS_FAIL("rendezvous store unreachable: {}; starting a new redis-server failed: {}", *why, e.what());
    }
    url_ = redis_->url();
    password_ = redis_->password();
    return fmt::format("{}; a new redis-server serves the store at {}", *why, url_);
  }
  if (!ping) return "";
  const std::string hp = url_.substr(std::string("redis://").size());
  const size_t colon = hp.rfind(':');
  const std::string host = colon == std::string::npos ? hp : hp.substr(0, colon);
  const int port = colon == std::string::npos ? 6379 : std::atoi(hp.c_str() + colon + 1);
  const RedisPing p = redis_ping(host, port, password_, milliseconds(2000));
  MS_CHECK(p.ok(), "rendezvous store unreachable: {} does not answer {}: {}", url_, p.command, p.reason);
  return "";
}

std::map<std::string, std::string> JobStore::env(const std::string& run_id) const {
  std::map<std::string, std::string> e = {{"MEGASCALE_STORE", url_}, {"MEGASCALE_RUN_ID", run_id}};
  if (!password_.empty()) e["MEGASCALE_STORE_PASSWORD"] = password_;
  return e;
}

}  // namespace ms::launch
