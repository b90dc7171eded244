// token_shard: llm.c shard writer/reader.
#include "data/token_shard.h"

#include <bit>        // std::endian
#include <cstdio>     // std::fopen, std::fread, std::fclose
#include <cstring>    // std::memcpy

#include "base/atomic_file.h"  // write_file_atomic
#include "base/check.h"

namespace ms {

static_assert(std::endian::native == std::endian::little, "token files are little-endian");

// ---------------------------------------------------------------------------------------------
// Writer

void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  MS_CHECK(tokens.size() < (1ull << 31), "{}: {} tokens do not fit an llm.c shard (< 2^31)", path,
           tokens.size());
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  write_file_atomic(path, {{header, sizeof(header)}, {tokens.data(), tokens.size() * sizeof(uint16_t)}});
}

bool has_token_shard_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  int32_t magic = 0;
  bool ok = std::fread(&magic, sizeof(magic), 1, f) == 1;
  std::fclose(f);
  return ok && magic == kShardMagic;
}

// ---------------------------------------------------------------------------------------------
// Reader

TokenShard::TokenShard(const std::string& path) : file_(path) {
  check_header();
  int32_t count;
  std::memcpy(&count, file_.data() + 2 * sizeof(int32_t), sizeof(count));
  num_tokens_ = static_cast<uint64_t>(count);
  tokens_ = reinterpret_cast<const uint16_t*>(file_.data() + kShardHeaderBytes);
}

void TokenShard::check_header() const {
  const std::string& p = file_.path();
  size_t size = file_.size();
  MS_CHECK(size >= kShardHeaderBytes,
           "{}: truncated: file has {} bytes, less than the {}-byte llm.c shard header", p, size,
           kShardHeaderBytes);
  int32_t h[3];
  std::memcpy(h, file_.data(), sizeof(h));
  MS_CHECK(h[0] == kShardMagic,
           "{}: bad magic {} (expected {} — is this an llm.c token shard?)", p, h[0], kShardMagic);
  MS_CHECK(h[1] == kShardVersion,
           "{}: unsupported version {} (expected {}: uint16 GPT-2 tokens)", p, h[1], kShardVersion);
  MS_CHECK(h[2] > 0, "{}: header says {} tokens (a shard must hold at least one token)", p, h[2]);
  uint64_t expect = kShardHeaderBytes + 2ull * static_cast<uint64_t>(h[2]);
  MS_CHECK(size == expect, "{}: {}: header says {} tokens ({} bytes) but file has {} bytes", p,
           size < expect ? "truncated" : "size mismatch", h[2], expect, size);
}

void TokenShard::validate(int vocab_size) const {
  check_header();
  MS_CHECK(vocab_size > 0 && vocab_size <= 65536, "{}: vocab size {} out of range for uint16 tokens",
           path(), vocab_size);
  const uint16_t* t = tokens_;
  const uint64_t n = num_tokens_;
  // Branch-free max scan first (fast path); locate the offender only on failure.
  uint16_t mx = 0;
  for (uint64_t i = 0; i < n; ++i) mx = t[i] > mx ? t[i] : mx;
  if (mx < vocab_size) return;
  for (uint64_t i = 0; i < n; ++i)
    MS_CHECK(t[i] < vocab_size, "{}: token id {} at position {} >= vocab size {}", path(), t[i], i,
             vocab_size);
}

}  // namespace ms
