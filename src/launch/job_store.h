// job_store: the private folders and the rendezvous store of one launch (launch-internal), shared by
// the single-machine launcher and the driver.
//  - make_private_dir / PrivateDir: a new folder of mode 0700 (only its owner may read it, whatever
//    the umask), watched by the launch's janitor from the moment it exists and removed when the
//    object goes.
//  - JobStore: the store the ranks rendezvous through, for the launch's lifetime:
//      "file"  a private folder <parent>/store-<tag>;
//      "redis" a redis-server started as the launch's child in <parent>/redis-<tag> (redis_server.h:
//              foreground, a random per-job password, dies with the launcher);
//      "redis://host:port"  an existing server, its password from MEGASCALE_STORE_PASSWORD or the
//              file named by MEGASCALE_STORE_PASSWORD_FILE (never from a command line).
//    env(run_id) gives the variables a rank needs (MEGASCALE_STORE, MEGASCALE_RUN_ID and, with a
//    password, MEGASCALE_STORE_PASSWORD). The password is never logged.
// Destructors never throw.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "launch/redis_server.h"
#include "launch/store_spec.h"

namespace ms::launch {

class Janitor;

// A new folder parent/name of mode 0700, watched by `janitor`. Throws ms::Error naming `what`.
std::filesystem::path make_private_dir(const std::filesystem::path& parent, const std::string& name, const char* what,
                                       Janitor& janitor);

class PrivateDir {
 public:
  // parent empty: the temporary folder.
  PrivateDir(const std::string& parent, const std::string& name, const char* what, Janitor& janitor);
  ~PrivateDir();
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  std::string path() const { return dir_.string(); }

 private:
  Janitor& janitor_;
  std::filesystem::path dir_;
};

class JobStore {
 public:
  // spec: file, redis or redis://host:port (auto: resolve_store first); parent: where its folder
  // goes (empty: the temporary folder); tag: unique per launch.
  JobStore(const StoreSpec& spec, const std::string& parent, const std::string& tag, Janitor& janitor);
  ~JobStore() { cleanup(); }
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // The store as the flag spells it ("file", "redis", "redis://host:port").
  std::string kind() const { return spec_.name(); }
  const std::string& url() const { return url_; }
  // The AUTH password (the server this launch started, or the environment's); empty: none.
  const std::string& password() const { return password_; }
  // The rendezvous variables of a run (run_id: the key prefix).
  std::map<std::string, std::string> env(const std::string& run_id) const;
  // Checks that the store still works and brings back what it can: a redis-server of this launch
  // that ended (or, with `ping`, does not answer PING) is started again, on a new port with a new
  // password (env() gives the new ones; ranks that rendezvoused before keep their connections); a
  // file store's folder that went is made again. Returns what it did in words ("" when nothing was
  // wrong). Throws ms::Error "rendezvous store unreachable: ..." when it cannot: a new server
  // does not come up, or (with `ping`) an outside redis:// server does not answer.
  std::string heal(bool ping);
  // A redis-server this launch started (its password is the launch's to hand to the ranks).
  bool started_server() const { return spec_.kind == StoreKind::kRedis; }
  // The pid of this launch's redis-server (-1: none, or another kind of store).
  pid_t server_pid() const { return redis_ ? redis_->pid() : -1; }

 private:
  void cleanup() noexcept;

  Janitor& janitor_;
  StoreSpec spec_;
  std::string url_, password_;
  std::filesystem::path dir_;
  std::optional<RedisServer> redis_;
};

}  // namespace ms::launch
