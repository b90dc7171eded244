// job_store: see job_store.h.
#include "launch/job_store.h"

#include <cstdlib>  // std::getenv
#include <filesystem>
#include <fstream>

#include "base/check.h"
#include "launch/redis_server.h"

namespace ms::launch {

namespace fs = std::filesystem;

namespace {
// A private folder: created new (never reused), mode 0700, or an ms::Error naming it.
void make_private_dir(const fs::path& dir) {
  std::error_code ec;
  MS_CHECK(fs::create_directory(dir, ec) && !ec, "cannot create the folder {}: {}", dir.string(),
           ec ? ec.message() : "it exists");
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec) {
    fs::remove_all(dir, ec);
    MS_FAIL("cannot make the folder {} private (mode 0700): {}", dir.string(), ec.message());
  }
}
}  // namespace

JobFolders::JobFolders(const std::string& parent_in, const std::string& tag) {
  const fs::path parent = parent_in.empty() ? fs::temp_directory_path() : fs::path(parent_in);
  std::error_code ec;
  fs::create_directories(parent, ec);
  const fs::path dir = parent / ("launch-" + tag);
  make_private_dir(dir);
  path_ = dir.string();
}

JobFolders::~JobFolders() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

JobStore::JobStore(const std::string& kind, const std::string& dir) : kind_(kind) {
  if (kind == "file") {
    const fs::path d = fs::path(dir) / "store";
    make_private_dir(d);
    url_ = "file:" + d.string();
  } else if (kind == "redis") {
    const fs::path d = fs::path(dir) / "redis";
    make_private_dir(d);
    redis_ = std::make_unique<RedisServer>(d);
    url_ = redis_->url();
    password_ = redis_->password();
  } else if (kind.rfind("redis://", 0) == 0) {
    url_ = kind;
    if (const char* p = std::getenv("MEGASCALE_STORE_PASSWORD"); p && *p) {
      password_ = p;
    } else if (const char* f = std::getenv("MEGASCALE_STORE_PASSWORD_FILE"); f && *f) {
      std::ifstream in(f);
      MS_CHECK(in && std::getline(in, password_), "cannot read the store password from {} (MEGASCALE_STORE_PASSWORD_FILE)", f);
    }
  } else {
    MS_FAIL("unknown store '{}': use file, redis or redis://host:port", kind);
  }
}

JobStore::~JobStore() = default;

std::map<std::string, std::string> JobStore::env(const std::string& run_id) const {
  std::map<std::string, std::string> e = {{"MEGASCALE_STORE", url_}, {"MEGASCALE_RUN_ID", run_id}};
  if (!password_.empty()) e["MEGASCALE_STORE_PASSWORD"] = password_;
  return e;
}

int JobStore::server_group() const { return redis_ ? redis_->pid() : -1; }

}  // namespace ms::launch
