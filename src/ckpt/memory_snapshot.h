// memory_snapshot: one rank's training state held in host memory, the unit of in-memory checkpoints
// (memory_checkpointer.h, memory_restore.h). A snapshot is a file in a memory-backed folder (tmpfs:
// /dev/shm; checkpoint.memory_dir, set per host by the driver's executors), mapped shared: it
// outlives the process that wrote it (a rank killed with -9 leaves it for its restarted self on the
// same host) but not the host. Layout: a 4 KiB header, then the payload (memory_checkpointer.h
// says what it holds). The header's `state` is written last: a snapshot is complete only when its
// payload was written, hashed (XXH64) and every field set; a crash midway leaves state 0, never a
// file that looks complete. Names: own-r<rank>-s<slot>.snap (a rank's own, two slots alternating)
// and rep-h<holder>-o<owner>-s<slot>.snap (a replica of rank `owner`'s snapshot received by rank
// `holder` on this host).
// Guarantees: every failure (open, size, map) is an ms::Error naming the path and the system error;
// check_snapshot names what is wrong with a snapshot instead of trusting it (magic, version, state,
// the job and layout it belongs to, size, XXH64).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ms {

inline constexpr size_t kSnapshotHeaderBytes = 4096;  // the payload starts at this (page-aligned) offset

struct SnapshotHeader {
  char magic[8];            // "MSMEMSN1"
  uint32_t version;         // 1
  uint32_t state;           // 0: being written; 1: complete (set last)
  uint64_t layout;          // the job and payload layout the snapshot belongs to (memory_checkpointer.h)
  int32_t rank, world;      // the rank whose state it is, in a world of this size
  int32_t step;             // optimizer steps taken
  int32_t reserved;
  uint64_t data_epoch, data_index;  // the data stream's position for the next step
  uint64_t tokens;          // tokens consumed so far
  float loss;               // the last step's training loss
  float reserved2;
  uint64_t payload_bytes;
  uint64_t payload_xxh64;
  double written_at;        // unix seconds when it became complete
};
static_assert(sizeof(SnapshotHeader) <= kSnapshotHeaderBytes);

// A snapshot file mapped read-write (shared). Move-only.
class SnapshotFile {
 public:
  SnapshotFile() = default;
  // Creates `path` with room for `payload_bytes` (header state 0), or maps it as it is when it
  // already has exactly that size (a restarted rank keeps the snapshots its host holds).
  static SnapshotFile create(const std::string& path, size_t payload_bytes);
  // Maps an existing file (any size); std::nullopt when it does not exist.
  static std::optional<SnapshotFile> open(const std::string& path);
  SnapshotFile(SnapshotFile&& o) noexcept;
  SnapshotFile& operator=(SnapshotFile&& o) noexcept;
  SnapshotFile(const SnapshotFile&) = delete;
  SnapshotFile& operator=(const SnapshotFile&) = delete;
  ~SnapshotFile();

  const std::string& path() const { return path_; }
  size_t file_bytes() const { return size_; }
  SnapshotHeader& header() { return *reinterpret_cast<SnapshotHeader*>(base_); }
  const SnapshotHeader& header() const { return *reinterpret_cast<const SnapshotHeader*>(base_); }
  uint8_t* payload() { return base_ + kSnapshotHeaderBytes; }
  const uint8_t* payload() const { return base_ + kSnapshotHeaderBytes; }
  size_t payload_capacity() const { return size_ > kSnapshotHeaderBytes ? size_ - kSnapshotHeaderBytes : 0; }
  // Backs every page of the file with memory now (tmpfs allocates a page on its first write:
  // ~2.5 s per GiB on this class of machine), keeping its contents; the saves that follow copy at
  // memory speed. Does nothing where every page is allocated already (a restarted rank's kept
  // file: its CPU would come out of the first steps after a restart for nothing).
  void prefault();
  // Marks the snapshot incomplete (before its payload is overwritten).
  void begin_write();
  // Completes the header (the fields of `h` but magic, version, state and hash: the payload's XXH64,
  // computed here unless given), state set last with a release fence.
  void complete(SnapshotHeader h, const uint64_t* known_hash = nullptr);

 private:
  void release();
  std::string path_;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
  bool sparse_ = false;  // created here, or kept with pages never written (prefault backs them)
};

// What is wrong with a snapshot ("" when it is a complete snapshot of `layout` whose payload has
// its XXH64; verify_hash false skips the hash, checking the rest).
std::string check_snapshot(const SnapshotFile& f, uint64_t layout, bool verify_hash = true);

// File names in a snapshot folder.
// A rank's own snapshots rotate over kOwnSnapshotSlots files (memory_checkpointer.h says which a
// save may overwrite).
inline constexpr int kOwnSnapshotSlots = 4;
std::string own_snapshot_name(int rank, int slot);
std::string replica_snapshot_name(int holder, int owner, int slot);

}  // namespace ms
