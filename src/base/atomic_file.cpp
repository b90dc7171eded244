// atomic_file.cpp: see atomic_file.h.
#include "base/atomic_file.h"

#include <unistd.h>  // fsync, getpid

#include <cerrno>  // errno
#include <cstdio>  // std::fopen, std::fwrite, std::rename, std::remove

#include "base/check.h"  // MS_SYSCHECK

namespace ms {

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
}

}  // namespace ms
