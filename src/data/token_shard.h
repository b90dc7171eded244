// token_shard: llm.c's token shard format, plus the read-only file mapping the data path shares.
// A shard is a 1024-byte header of 256 little-endian int32 (magic, version, token count, the rest
// zero) followed by `count` token ids: magic 20240520 version 1 holds uint16 ids (GPT-2's
// vocabulary), magic 20240801 version 7 uint32 ids (llm.c's Llama 3 shards: vocabularies over
// 65536). write_token_shard() / write_token_shard_u32() write atomically (temporary file + rename),
// so a reader never sees a half-written shard. TokenShard maps either kind read-only; its
// constructor rejects a file whose header or size is wrong, and validate(V) also rejects any token
// id >= V. Every error is an ms::Error naming the file and the reason (bad magic, bad version,
// truncated, token id out of range with its position).
#pragma once
#include <cstddef>  // size_t
#include <cstdint>  // uint8_t, uint16_t, uint64_t
#include <string>
#include <vector>

#include "base/mapped_file.h"  // MappedFile

namespace ms {

inline constexpr int32_t kShardMagic = 20240520;  // uint16 ids
inline constexpr int32_t kShardVersion = 1;
inline constexpr int32_t kShardMagicU32 = 20240801;  // uint32 ids (llm.c's "llama-3" shards)
inline constexpr int32_t kShardVersionU32 = 7;
inline constexpr size_t kShardHeaderInts = 256;
inline constexpr size_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);  // 1024


// Writes `tokens` as an llm.c shard at `path` (via `path.tmp.<pid>` + rename): uint16 ids, or
// uint32 ids (the 20240801 / version 7 header).
void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens);
void write_token_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens);

// True when the file starts with either llm.c shard magic (used to classify data paths).
bool has_token_shard_magic(const std::string& path);

class TokenShard {
 public:
  // Maps the file and checks the header: a known (magic, version) pair, count > 0, file size ==
  // 1024 + width * count.
  explicit TokenShard(const std::string& path);

  // Checks the header again and every token id < vocab_size; throws naming the first bad token.
  void validate(int vocab_size) const;

  const std::string& path() const { return file_.path(); }
  uint64_t num_tokens() const { return num_tokens_; }
  int token_bytes() const { return token_bytes_; }  // 2 (uint16 ids) or 4 (uint32 ids)
  const uint16_t* tokens() const;      // the ids of a uint16 shard (an error for a uint32 one)
  const uint32_t* tokens_u32() const;  // the ids of a uint32 shard (an error for a uint16 one)
  // Copies ids [offset, offset + count) into out, either width; an error past the end.
  void read(uint64_t offset, size_t count, int* out) const;

 private:
  void check_header() const;
  MappedFile file_;
  uint64_t num_tokens_ = 0;
  int token_bytes_ = 2;
  const uint8_t* tokens_ = nullptr;
};

}  // namespace ms
