// dir_lock.cpp: see dir_lock.h.
#include "ckpt/dir_lock.h"

#include <fcntl.h>          // open
#include <sys/file.h>       // flock
#include <sys/stat.h>       // fstat
#include <sys/sysmacros.h>  // major, minor
#include <unistd.h>         // close

#include <cerrno>
#include <chrono>
#include <cstring>  // std::strerror
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "base/check.h"     // MS_CHECK, MS_FAIL
#include "ckpt/ckpt_comm.h" // broadcast_text

namespace ms {

namespace fs = std::filesystem;

namespace {
// The pid holding a flock on the file behind fd, from /proc/locks ("1: FLOCK ADVISORY WRITE <pid>
// <maj>:<min>:<inode> ..."); empty if not found.
std::string flock_holder(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {};
  const std::string id = fmt::format("{:02x}:{:02x}:{}", major(st.st_dev), minor(st.st_dev), st.st_ino);
  std::ifstream in("/proc/locks");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string n, kind, adv, mode, pid, where;
    if (!(f >> n >> kind)) continue;
    if (kind == "->") f >> kind;  // a waiter's line
    if (kind != "FLOCK" || !(f >> adv >> mode >> pid >> where)) continue;
    if (where == id) return pid;
  }
  return {};
}
}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& key, double wait_s) : dir_(dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  MS_CHECK(!ec, "{} = {}: cannot create the folder: {}", key, dir, ec.message());
  fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MS_CHECK(fd_ >= 0, "{} = {}: cannot open the folder to lock it: {}", key, dir, std::strerror(errno));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(wait_s * 1e3));
  for (;;) {
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EWOULDBLOCK && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const std::string holder = err == EWOULDBLOCK ? flock_holder(fd_) : std::string();
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) MS_FAIL("{} = {}: cannot lock the folder: {}", key, dir, std::strerror(err));
    MS_FAIL("{} = {}: another job is using this folder ({}); two jobs on one run folder would mix their "
            "checkpoints and logs. Wait for it to end or choose another {}", key, dir,
            holder.empty() ? "it holds the folder's lock" : "process " + holder + " holds the folder's lock", key);
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor releases the lock
}

std::vector<std::unique_ptr<DirLock>> lock_run_dirs(const Config& cfg, Communicator* world, int rank) {
  std::vector<std::unique_ptr<DirLock>> locks;
  std::string error;
  if (rank == 0) {
    try {
      const std::string out = cfg.train.out_dir;
      const std::string ck = cfg.checkpoint.dir.empty() ? out + "/checkpoints" : cfg.checkpoint.dir;
      locks.push_back(std::make_unique<DirLock>(out, "train.out_dir"));
      std::error_code ec;
      fs::create_directories(ck, ec);
      if (!fs::equivalent(out, ck, ec))
        locks.push_back(std::make_unique<DirLock>(ck, cfg.checkpoint.dir.empty() ? "checkpoint folder" : "checkpoint.dir"));
    } catch (const std::exception& e) {
      error = e.what();
      locks.clear();
    }
  }
  broadcast_text(world, error, 0);
  MS_CHECK(error.empty(), "{}", error);
  return locks;
}

}  // namespace ms
