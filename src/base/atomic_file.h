// atomic_file: writes a file so that readers see either the old file or the complete new one:
// the bytes go to "<path>.tmp.<pid>", are flushed and fsync'ed, then renamed over <path>. On any
// failure the temporary file is removed and an ms::Error names the file and the system error.
#pragma once
#include <cstddef>  // size_t
#include <initializer_list>
#include <string>
#include <vector>

namespace ms {

struct ByteRange {
  const void* data;
  size_t size;
};

// Writes the ranges back to back into `path`, atomically (see above).
void write_file_atomic(const std::string& path, const std::vector<ByteRange>& parts);
inline void write_file_atomic(const std::string& path, std::initializer_list<ByteRange> parts) {
  write_file_atomic(path, std::vector<ByteRange>(parts));
}

}  // namespace ms
