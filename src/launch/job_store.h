// job_store: the folders and the rendezvous store of one launch (launch-internal), shared by the
// single-machine launcher and the driver.
//  - JobFolders: a private folder (mode 0700) for the launch's files (the store, run.json, ...),
//    removed when the object goes.
//  - JobStore: the store the ranks rendezvous through, for the launch's lifetime:
//      "file"  a folder of the JobFolders (mode 0700: readable by its owner only);
//      "redis" a redis-server started as the launch's child (redis_server.h: foreground, a random
//              per-job password, dies with the launcher);
//      "redis://host:port"  an existing server, its password from MEGASCALE_STORE_PASSWORD or the
//              file named by MEGASCALE_STORE_PASSWORD_FILE (never from a command line).
//    env(run_id) gives the variables a rank needs (MEGASCALE_STORE, MEGASCALE_RUN_ID and, for
//    Redis, MEGASCALE_STORE_PASSWORD). The password is never logged.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ms::launch {

class RedisServer;

class JobFolders {
 public:
  // parent: where to create it (empty: the temporary folder); tag: unique per launch.
  JobFolders(const std::string& parent, const std::string& tag);
  ~JobFolders();
  JobFolders(const JobFolders&) = delete;
  JobFolders& operator=(const JobFolders&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class JobStore {
 public:
  // kind: file, redis or redis://host:port; dir: a private folder for its files.
  JobStore(const std::string& kind, const std::string& dir);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  const std::string& kind() const { return kind_; }
  const std::string& url() const { return url_; }
  // The rendezvous variables of a run (run_id: the key prefix).
  std::map<std::string, std::string> env(const std::string& run_id) const;
  // The process group of a server this store started (-1: none), for a janitor.
  int server_group() const;

 private:
  std::string kind_, url_, password_;
  std::unique_ptr<RedisServer> redis_;
};

}  // namespace ms::launch
