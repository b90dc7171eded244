// atomic_file: the one way megascale publishes files and folders, so that readers (and a machine
// that loses power) see either the old version or the complete new one, never a mix:
//  - write_file_atomic: the bytes go to "<path>.tmp.<pid>", are flushed and fsync'ed, renamed over
//    <path>, and the parent directory is fsync'ed so the rename itself is durable.
//  - publish_directory: a folder written in full under a temporary name (its files written with
//    write_file_atomic or fsync'ed) replaces the folder at its final name: the temporary folder is
//    fsync'ed, swapped with the old folder in one atomic rename (RENAME_EXCHANGE), the parent
//    fsync'ed, and only then is the old version removed. Nothing is removed before its
//    replacement is in place.
// On any failure the temporary is removed and an ms::Error names the file and the system error.
#pragma once
#include <cstddef>  // size_t
#include <initializer_list>
#include <string>
#include <string_view>
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
// A text file (JSON, TOML).
inline void write_text_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, {{text.data(), text.size()}});
}

// Makes `dir`'s entries (renames, creations) durable: open + fsync of the directory.
void fsync_directory(const std::string& dir);

// Replaces final_dir by tmp_dir (see above); final_dir need not exist. Both in one file system.
void publish_directory(const std::string& tmp_dir, const std::string& final_dir);

}  // namespace ms
