// shard_meta: validate once. `megascale prepare` records every shard's size and xxHash64 in
// meta.json beside the shards (record_shard_checksums); when a loader opens a shard whose
// meta.json lists it, the header, the size and the checksum stand in for the scan of every token
// id (the ids were checked when prepare wrote them, against the tokenizer's vocabulary).
// Guarantees: a listed shard whose bytes changed fails with an error naming the file and both
// checksums; a shard not listed (or listed for a larger vocabulary than the model's) is scanned.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ms {

class TokenShard;

// xxHash64 (seed 0) of n bytes, as 16 lowercase hex digits.
std::string xxh64_hex(const void* data, size_t n);

// meta["checksums"][file name] = {"bytes": size, "xxh64": hex} for every shard path.
void record_shard_checksums(nlohmann::json& meta, const std::vector<std::string>& shard_paths);

// True when meta.json beside the shard lists it for a vocabulary <= vocab_size and its size and
// checksum match (the id scan can be skipped); false when not listed. Throws when listed and the
// bytes differ.
bool shard_verified_by_meta(const TokenShard& shard, int vocab_size);

}  // namespace ms
