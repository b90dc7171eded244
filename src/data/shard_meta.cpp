// shard_meta.cpp: see shard_meta.h.
#include "data/shard_meta.h"

#include <xxhash.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/check.h"         // MS_CHECK
#include "base/mapped_file.h"   // MappedFile
#include "data/token_shard.h"   // TokenShard

namespace ms {

namespace fs = std::filesystem;

std::string xxh64_hex(const void* data, size_t n) { return fmt::format("{:016x}", XXH64(data, n, 0)); }

void record_shard_checksums(nlohmann::json& meta, const std::vector<std::string>& shard_paths) {
  for (const std::string& p : shard_paths) {
    const MappedFile f(p);
    meta["checksums"][fs::path(p).filename().string()] = {{"bytes", f.size()}, {"xxh64", xxh64_hex(f.data(), f.size())}};
  }
}

bool shard_verified_by_meta(const TokenShard& shard, int vocab_size) {
  const fs::path meta_path = fs::path(shard.path()).parent_path() / "meta.json";
  std::ifstream in(meta_path);
  if (!in) return false;
  nlohmann::json meta = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const std::string name = fs::path(shard.path()).filename().string();
  if (meta.is_discarded() || !meta.contains("checksums") || !meta["checksums"].contains(name) ||
      !meta.contains("vocab_size") || !meta["vocab_size"].is_number_integer() ||
      meta["vocab_size"].get<int64_t>() > vocab_size)
    return false;
  const nlohmann::json& rec = meta["checksums"][name];
  const MappedFile f(shard.path());
  MS_CHECK(rec.value("bytes", uint64_t{0}) == f.size(), "{}: {} bytes, but {} records {} (the file changed since "
           "prepare)", shard.path(), f.size(), meta_path.string(), rec.value("bytes", uint64_t{0}));
  const std::string got = xxh64_hex(f.data(), f.size()), want = rec.value("xxh64", std::string());
  MS_CHECK(got == want, "{}: xxHash64 {} differs from {} recorded in {} (the file is corrupt or changed since "
           "prepare)", shard.path(), got, want, meta_path.string());
  return true;
}

}  // namespace ms
