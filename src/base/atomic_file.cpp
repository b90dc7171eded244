// atomic_file.cpp: see atomic_file.h.
#include "base/atomic_file.h"

#include <fcntl.h>   // open, O_DIRECTORY, AT_FDCWD
#include <stdio.h>   // renameat2, RENAME_EXCHANGE
#include <unistd.h>  // fsync, getpid, close

#include <cerrno>  // errno
#include <cstdio>  // std::fopen, std::fwrite, std::rename, std::remove
#include <filesystem>

#include "base/check.h"  // MS_CHECK, MS_SYSCHECK

namespace ms {

namespace {
std::string parent_of(const std::string& path) {
  const std::filesystem::path p = std::filesystem::absolute(path).parent_path();
  return p.empty() ? std::string("/") : p.string();
}
}  // namespace

void write_file_atomic(const std::string& path, const std::vector<ByteRange>& parts) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  MS_SYSCHECK(f != nullptr, "{}: cannot create", tmp);
  bool ok = true;
  for (const ByteRange& r : parts)
    if (ok && r.size > 0) ok = std::fwrite(r.data, 1, r.size, f) == r.size;
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(::fileno(f)) == 0) && ok;
  int e = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    errno = e;
    MS_SYSCHECK(false, "{}: write failed", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    e = errno;
    std::remove(tmp.c_str());
    errno = e;
    MS_SYSCHECK(false, "{}: cannot rename {} to it", path, tmp);
  }
  fsync_directory(parent_of(path));
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MS_SYSCHECK(fd >= 0, "{}: cannot open directory to fsync it", dir);
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  errno = e;
  MS_SYSCHECK(rc == 0, "{}: fsync of the directory failed", dir);
}

void publish_directory(const std::string& tmp_dir, const std::string& final_dir) {
  namespace fs = std::filesystem;
  fsync_directory(tmp_dir);
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    // Swap atomically: final_dir now holds the new version, tmp_dir the old one.
    MS_SYSCHECK(::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0,
                "{}: cannot exchange it with {}", final_dir, tmp_dir);
    fsync_directory(parent_of(final_dir));
    fs::remove_all(tmp_dir, ec);  // the old version; a leftover is harmless
    MS_CHECK(!ec, "{}: cannot remove the replaced version: {}", tmp_dir, ec.message());
  } else {
    MS_SYSCHECK(std::rename(tmp_dir.c_str(), final_dir.c_str()) == 0, "{}: cannot rename {} to it", final_dir, tmp_dir);
    fsync_directory(parent_of(final_dir));
  }
}

}  // namespace ms
