// storage: where checkpoints live, behind one small interface so the trainer never touches paths.
// LocalStorage serves a local or shared POSIX file system (NFS, Lustre: every rank sees the same
// folder); an object store can be added as another implementation without touching the callers.
// Durability: write_file and write_text put the bytes under a temporary name, fsync them, rename
// them into place and fsync the folder; publish_dir makes a finished folder visible in one rename
// (replacing an older one of the same name only after the new one is in place). Every failure is an
// ms::Error naming the path and the system error (ENOSPC, EFBIG, EIO, ...).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/atomic_file.h"  // ByteRange
#include "base/mapped_file.h"  // MappedFile

namespace ms {

class CheckpointStorage {
 public:
  virtual ~CheckpointStorage() = default;
  virtual std::string describe() const = 0;  // for messages: the root folder or URL
  // Paths are relative to the root ("step-00000010/rank-00000.safetensors").
  // `midway` (fault injection) runs once, when half of the bytes are written. Returns XXH64 (seed 0)
  // of the bytes written.
  virtual uint64_t write_file(const std::string& rel, const std::vector<ByteRange>& parts,
                              const std::function<void()>& midway = {}) = 0;
  virtual void write_text(const std::string& rel, std::string_view text) = 0;
  virtual std::string read_text(const std::string& rel) const = 0;
  // A pointer file (`latest`): a regular file, never followed through a symlink, of at most `max`
  // bytes; the text without trailing whitespace. Throws naming the path and the reason otherwise.
  virtual std::string read_pointer(const std::string& rel, size_t max) const = 0;
  virtual MappedFile open(const std::string& rel) const = 0;  // whole file, read-only
  virtual bool exists(const std::string& rel) const = 0;
  virtual uint64_t size(const std::string& rel) const = 0;  // throws if absent
  virtual std::vector<std::string> list(const std::string& rel_dir = "") const = 0;  // entry names, sorted
  virtual void make_dir(const std::string& rel) = 0;  // with parents; an existing folder is fine
  virtual void publish_dir(const std::string& tmp_rel, const std::string& final_rel) = 0;
  virtual void remove_all(const std::string& rel) = 0;  // a missing one is fine
};

class LocalStorage final : public CheckpointStorage {
 public:
  // create: make the root folder (with parents) if it does not exist.
  explicit LocalStorage(std::string root, bool create = true);
  std::string describe() const override { return root_; }
  uint64_t write_file(const std::string& rel, const std::vector<ByteRange>& parts,
                      const std::function<void()>& midway = {}) override;
  void write_text(const std::string& rel, std::string_view text) override;
  std::string read_text(const std::string& rel) const override;
  std::string read_pointer(const std::string& rel, size_t max) const override;
  MappedFile open(const std::string& rel) const override;
  bool exists(const std::string& rel) const override;
  uint64_t size(const std::string& rel) const override;
  std::vector<std::string> list(const std::string& rel_dir = "") const override;
  void make_dir(const std::string& rel) override;
  void publish_dir(const std::string& tmp_rel, const std::string& final_rel) override;
  void remove_all(const std::string& rel) override;
  std::string path(const std::string& rel) const { return rel.empty() ? root_ : root_ + "/" + rel; }

 private:
  std::string root_;
};

// XXH64 (seed 0) of a byte range, as the 16 hex digits manifests hold.
std::string xxh64_hex(uint64_t h);
uint64_t xxh64_of(const void* data, size_t n);

}  // namespace ms
