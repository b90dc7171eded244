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

namespace {

void write_shard(const std::string& path, int32_t magic, int32_t version, const void* data, size_t n,
                 size_t width) {
  MS_CHECK(n < (1ull << 31), "{}: {} tokens do not fit an llm.c shard (< 2^31)", path, n);
  int32_t header[kShardHeaderInts] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(n);
  write_file_atomic(path, {{header, sizeof(header)}, {data, n * width}});
}

}  // namespace

void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_shard(path, kShardMagic, kShardVersion, tokens.data(), tokens.size(), sizeof(uint16_t));
}

void write_token_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_shard(path, kShardMagicU32, kShardVersionU32, tokens.data(), tokens.size(), sizeof(uint32_t));
}

bool has_token_shard_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  int32_t magic = 0;
  bool ok = std::fread(&magic, sizeof(magic), 1, f) == 1;
  std::fclose(f);
  return ok && (magic == kShardMagic || magic == kShardMagicU32);
}

// ---------------------------------------------------------------------------------------------
// Reader

TokenShard::TokenShard(const std::string& path) : file_(path) {
  check_header();
  int32_t h[3];
  std::memcpy(h, file_.data(), sizeof(h));
  num_tokens_ = static_cast<uint64_t>(h[2]);
  token_bytes_ = h[0] == kShardMagicU32 ? 4 : 2;
  tokens_ = reinterpret_cast<const uint8_t*>(file_.data()) + kShardHeaderBytes;
}

const uint16_t* TokenShard::tokens() const {
  MS_CHECK(token_bytes_ == 2, "{}: holds uint32 token ids, read as uint16", path());
  return reinterpret_cast<const uint16_t*>(tokens_);
}

const uint32_t* TokenShard::tokens_u32() const {
  MS_CHECK(token_bytes_ == 4, "{}: holds uint16 token ids, read as uint32", path());
  return reinterpret_cast<const uint32_t*>(tokens_);
}

void TokenShard::read(uint64_t offset, size_t count, int* out) const {
  MS_CHECK(offset <= num_tokens_ && count <= num_tokens_ - offset,
           "{}: read of tokens [{}, {}) past the end ({} tokens)", path(), offset, offset + count, num_tokens_);
  if (token_bytes_ == 2) {
    const uint16_t* t = tokens() + offset;
    for (size_t k = 0; k < count; ++k) out[k] = t[k];
  } else {
    const uint32_t* t = tokens_u32() + offset;
    for (size_t k = 0; k < count; ++k) out[k] = static_cast<int>(t[k]);
  }
}

void TokenShard::check_header() const {
  const std::string& p = file_.path();
  size_t size = file_.size();
  MS_CHECK(size >= kShardHeaderBytes,
           "{}: truncated: file has {} bytes, less than the {}-byte llm.c shard header", p, size,
           kShardHeaderBytes);
  int32_t h[3];
  std::memcpy(h, file_.data(), sizeof(h));
  MS_CHECK(h[0] == kShardMagic || h[0] == kShardMagicU32,
           "{}: bad magic {} (expected {} or {} — is this an llm.c token shard?)", p, h[0], kShardMagic,
           kShardMagicU32);
  const bool u32 = h[0] == kShardMagicU32;
  MS_CHECK(h[1] == (u32 ? kShardVersionU32 : kShardVersion),
           "{}: unsupported version {} (expected {}: {})", p, h[1], u32 ? kShardVersionU32 : kShardVersion,
           u32 ? "uint32 tokens after magic 20240801" : "uint16 GPT-2 tokens");
  MS_CHECK(h[2] > 0, "{}: header says {} tokens (a shard must hold at least one token)", p, h[2]);
  uint64_t expect = kShardHeaderBytes + (u32 ? 4ull : 2ull) * static_cast<uint64_t>(h[2]);
  MS_CHECK(size == expect, "{}: {}: header says {} tokens ({} bytes) but file has {} bytes", p,
           size < expect ? "truncated" : "size mismatch", h[2], expect, size);
}

namespace {

// Branch-free max scan first (fast path); locate the offender only on failure.
template <class T>
void check_ids(const std::string& path, const T* t, uint64_t n, int vocab_size) {
  T mx = 0;
  for (uint64_t i = 0; i < n; ++i) mx = t[i] > mx ? t[i] : mx;
  if (static_cast<uint64_t>(mx) < static_cast<uint64_t>(vocab_size)) return;
  for (uint64_t i = 0; i < n; ++i)
    MS_CHECK(static_cast<uint64_t>(t[i]) < static_cast<uint64_t>(vocab_size),
             "{}: token id {} at position {} >= vocab size {}", path, t[i], i, vocab_size);
}

}  // namespace

void TokenShard::validate(int vocab_size) const {
  check_header();
  if (token_bytes_ == 2) {
    MS_CHECK(vocab_size > 0 && vocab_size <= 65536, "{}: vocab size {} out of range for uint16 tokens",
             path(), vocab_size);
    check_ids(path(), tokens(), num_tokens_, vocab_size);
  } else {
    MS_CHECK(vocab_size > 0, "{}: vocab size {} out of range for uint32 tokens", path(), vocab_size);
    check_ids(path(), tokens_u32(), num_tokens_, vocab_size);
  }
}

}  // namespace ms
