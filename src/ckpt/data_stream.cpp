// data_stream.cpp: see data_stream.h.
#include "ckpt/data_stream.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ckpt/storage.h"      // xxh64_of, xxh64_hex
#include "data/dataloader.h"   // expand_data_paths

namespace ms {

namespace fs = std::filesystem;

namespace {
// meta.json's checksums beside `dir` (name -> xxh64), empty when there is none or it is unreadable.
std::map<std::string, std::string> meta_checksums(const fs::path& dir) {
  std::map<std::string, std::string> out;
  std::ifstream in(dir / "meta.json");
  if (!in) return out;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object() && j.contains("checksums") && j["checksums"].is_object())
      for (const auto& [name, c] : j["checksums"].items())
        if (c.is_object() && c.contains("xxh64") && c["xxh64"].is_string()) out[name] = c["xxh64"].get<std::string>();
  } catch (const std::exception&) {
  }
  return out;
}

uint64_t size_or_zero(const fs::path& p) {
  std::error_code ec;
  const uint64_t n = fs::file_size(p, ec);
  return ec ? 0 : n;
}
}  // namespace

ManifestDataStream data_stream_of(const Config& cfg) {
  ManifestDataStream d;
  d.present = true;
  std::string text;
  std::map<fs::path, std::map<std::string, std::string>> metas;
  for (const std::string& f : expand_data_paths({cfg.data.train}, "data.train")) {
    const fs::path p(f);
    auto it = metas.find(p.parent_path());
    if (it == metas.end()) it = metas.emplace(p.parent_path(), meta_checksums(p.parent_path())).first;
    const std::string name = p.filename().string();
    auto c = it->second.find(name);
    fs::path idx = p;
    idx.replace_extension(".idx");
    text += fmt::format("{}\t{}\t{}\t{}\n", name, size_or_zero(p), c == it->second.end() ? "-" : c->second,
                        fs::exists(idx) ? size_or_zero(idx) : 0);
  }
  d.files = xxh64_hex(xxh64_of(text.data(), text.size()));
  d.seed = cfg.train.seed;
  d.seq_len = cfg.train.seq_len;
  d.samples_per_step = static_cast<int64_t>(cfg.train.batch_size) * cfg.train.grad_accum * cfg.parallel.dp;
  d.shuffle = cfg.data.shuffle;
  return d;
}

}  // namespace ms
