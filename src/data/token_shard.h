// token_shard: llm.c's token shard format, plus the read-only file mapping the data path shares.
// A shard is a 1024-byte header of 256 little-endian int32 (magic 20240520, version 1, token count,
// the rest zero) followed by `count` uint16 token ids (GPT-2 vocabulary). write_token_shard()
// writes atomically (temporary file + rename), so a reader never sees a half-written shard.
// TokenShard maps a shard read-only; its constructor rejects a file whose header or size is wrong,
// and validate(V) also rejects any token id >= V. Every error is an ms::Error naming the file and
// the reason (bad magic, bad version, truncated, token id out of range with its position).
#pragma once
#include <cstddef>  // size_t
#include <cstdint>  // uint8_t, uint16_t, uint64_t
#include <string>
#include <vector>

#include "base/mapped_file.h"  // MappedFile

namespace ms {

inline constexpr int32_t kShardMagic = 20240520;
inline constexpr int32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);  // 1024


// Writes `tokens` as an llm.c shard at `path` (via `path.tmp.<pid>` + rename).
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// True when the file starts with the llm.c shard magic (used to classify data paths).
bool has_token_shard_magic(const std::string& path);

class TokenShard {
 public:
  // Maps the file and checks the header: magic, version, count > 0, file size == 1024 + 2*count.
  explicit TokenShard(const std::string& path);

  // Checks the header again and every token id < vocab_size; throws naming the first bad token.
  void validate(int vocab_size) const;

  const std::string& path() const { return file_.path(); }
  uint64_t num_tokens() const { return num_tokens_; }
  const uint16_t* tokens() const { return tokens_; }

 private:
  void check_header() const;
  MappedFile file_;
  uint64_t num_tokens_ = 0;
  const uint16_t* tokens_ = nullptr;
};

}  // namespace ms
