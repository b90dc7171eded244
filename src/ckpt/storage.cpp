// storage.cpp: see storage.h.
#include "ckpt/storage.h"

#include <fcntl.h>   // open
#include <sys/stat.h>  // fstat, S_ISREG
#include <unistd.h>  // write, fsync, close, getpid

#include <algorithm>  // std::sort
#include <cerrno>
#include <cstdlib>  // std::aligned_alloc
#include <cstring>  // std::strerror, std::memcpy
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <xxhash.h>

#include "base/check.h"  // MS_CHECK, MS_SYSCHECK

namespace ms {

namespace fs = std::filesystem;

namespace {
// A heap block at an alignment (direct I/O wants the block size).
class AlignedBytes {
 public:
  AlignedBytes(size_t n, size_t align) : p_(static_cast<char*>(std::aligned_alloc(align, n))) {
    MS_CHECK(p_, "cannot allocate {} bytes for the checkpoint writer", n);
  }
  ~AlignedBytes() { std::free(p_); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
  char* data() { return p_; }

 private:
  char* p_;
};
}  // namespace

std::string xxh64_hex(uint64_t h) { return fmt::format("{:016x}", h); }
uint64_t xxh64_of(const void* data, size_t n) { return XXH64(data, n, 0); }

LocalStorage::LocalStorage(std::string root, bool create) : root_(std::move(root)) {
  if (!create) return;
  std::error_code ec;
  fs::create_directories(root_, ec);
  MS_CHECK(!ec, "{}: cannot create the checkpoint folder: {}", root_, ec.message());
}

uint64_t LocalStorage::write_file(const std::string& rel, const std::vector<ByteRange>& parts,
                                  const std::function<void()>& midway) {
  // Direct I/O (O_DIRECT) through an aligned bounce buffer: on this kind of machine the page-cache
  // copy and the write-back of a buffered write cost several times the CPU of the transfer itself,
  // and that CPU is the training's. File systems without O_DIRECT (tmpfs) get buffered writes.
  // The last block is written padded and the file truncated to its size.
  constexpr size_t kAlign = 4096, kChunk = size_t{8} << 20;
  const std::string final_path = path(rel), tmp = final_path + ".part";
  bool direct = true;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) {
    direct = false;
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  MS_SYSCHECK(fd >= 0, "{}: cannot create", tmp);
  AlignedBytes bounce(kChunk, kAlign);
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  size_t total = 0, written = 0, fill = 0;
  for (const ByteRange& r : parts) total += r.size;
  bool halfway_done = !midway;
  int err = 0;
  // Writes the bounce buffer's first n bytes (a multiple of kAlign unless buffered).
  auto flush = [&](size_t n) {
    const char* p = bounce.data();
    size_t left = n;
    while (left > 0 && err == 0) {
      const ssize_t w = ::write(fd, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EINVAL && direct) {  // the file system refuses direct I/O after all
          direct = false;
          if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT) == 0) continue;
        }
        err = errno;
        break;
      }
      p += w, left -= static_cast<size_t>(w);
    }
  };
  for (const ByteRange& r : parts) {
    XXH64_update(st, r.data, r.size);
    const char* p = static_cast<const char*>(r.data);
    size_t left = r.size;
    while (left > 0 && err == 0) {
      const size_t n = std::min(left, kChunk - fill);
      std::memcpy(bounce.data() + fill, p, n);
      fill += n, p += n, left -= n;
      if (fill == kChunk) {
        flush(kChunk);
        written += kChunk, fill = 0;
        if (!halfway_done && written >= total / 2) {
          halfway_done = true;
          midway();
        }
      }
    }
  }
  if (err == 0 && fill > 0) {
    const size_t padded = direct ? (fill + kAlign - 1) / kAlign * kAlign : fill;
    std::memset(bounce.data() + fill, 0, padded - fill);
    flush(padded);
    if (err == 0) written += fill;
    if (!halfway_done && err == 0) midway();
  }
  if (err == 0 && ::ftruncate(fd, static_cast<off_t>(total)) != 0) err = errno;
  const uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    MS_FAIL("{}: write failed after {} of {} bytes: {}", final_path, written, total, std::strerror(err));
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    MS_FAIL("{}: cannot rename {} to it: {}", final_path, tmp, std::strerror(err));
  }
  fsync_directory(fs::path(final_path).parent_path().string());
  return h;
}

void LocalStorage::write_text(const std::string& rel, std::string_view text) { write_text_atomic(path(rel), text); }

std::string LocalStorage::read_text(const std::string& rel) const {
  std::ifstream in(path(rel), std::ios::binary);
  MS_SYSCHECK(in.good(), "{}: cannot open", path(rel));
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string LocalStorage::read_pointer(const std::string& rel, size_t max) const {
  const std::string p = path(rel);
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ELOOP) MS_FAIL("{}: is a symbolic link; a checkpoint pointer is a plain file", p);
  MS_SYSCHECK(fd >= 0, "{}: cannot open", p);
  struct stat st {};
  std::string text(max + 1, '\0');
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = ::read(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  MS_CHECK(S_ISREG(st.st_mode), "{}: not a regular file; a checkpoint pointer is a plain file", p);
  MS_CHECK(n >= 0, "{}: cannot read: {}", p, std::strerror(err));
  MS_CHECK(static_cast<size_t>(n) <= max, "{}: longer than {} bytes; a checkpoint pointer holds a folder name", p, max);
  text.resize(static_cast<size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) text.pop_back();
  return text;
}

MappedFile LocalStorage::open(const std::string& rel) const { return MappedFile(path(rel)); }

bool LocalStorage::exists(const std::string& rel) const {
  std::error_code ec;
  return fs::exists(path(rel), ec);
}

uint64_t LocalStorage::size(const std::string& rel) const {
  std::error_code ec;
  const uint64_t n = fs::file_size(path(rel), ec);
  MS_CHECK(!ec, "{}: {}", path(rel), ec.message());
  return n;
}

std::vector<std::string> LocalStorage::list(const std::string& rel_dir) const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path(rel_dir), ec)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void LocalStorage::make_dir(const std::string& rel) {
  std::error_code ec;
  fs::create_directories(path(rel), ec);
  MS_CHECK(!ec, "{}: cannot create: {}", path(rel), ec.message());
}

void LocalStorage::publish_dir(const std::string& tmp_rel, const std::string& final_rel) {
  publish_directory(path(tmp_rel), path(final_rel));
}

void LocalStorage::remove_all(const std::string& rel) {
  std::error_code ec;
  fs::remove_all(path(rel), ec);
  MS_CHECK(!ec, "{}: cannot remove: {}", path(rel), ec.message());
}

}  // namespace ms
