// mapped_file: a whole file mapped read-only (mmap), for readers of large token files: pages come
// from the page cache on demand and are shared by every process reading the same file.
// Guarantees: opening checks the file is regular and names the path and the system error on any
// failure; an empty file maps to nothing (data() == nullptr, size() == 0). Move-only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ms {

// A whole file mapped read-only (mmap; an empty file maps to nothing). Move-only.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws ms::Error naming the path on failure
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ms
