// prepare: corpus files -> documents -> tokens -> llm.c train/val shards + meta.json (the
// pipeline; the Brown reader is brown.cpp). Every file written goes through write_file_atomic.
#include "data/prepare.h"

#include "data/shard_meta.h"  // record_shard_checksums, xxh64_hex

#include <algorithm>   // std::sort, std::min
#include <cmath>       // std::floor, std::log2, std::log
#include <cstdio>      // std::fflush
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream
#include <regex>       // std::regex (shard file names only)
#include <sstream>     // std::stringstream

#include <fmt/format.h>       // fmt::print
#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/atomic_file.h"
#include "base/check.h"
#include "data/brown.h"
#include "data/token_shard.h"
#include "data/hf_tokenizer.h"  // load_tokenizer
#include "data/tokenizer.h"
#include "base/clock.h"  // Stopwatch

namespace ms {

namespace fs = std::filesystem;

namespace {

std::string read_whole(const std::string& path, size_t max_bytes = SIZE_MAX) {
  std::ifstream f(path, std::ios::binary);
  MS_CHECK(f.good(), "{}: cannot open", path);
  std::string s;
  if (max_bytes == SIZE_MAX) {
    std::stringstream ss;
    ss << f.rdbuf();
    s = ss.str();
  } else {
    s.resize(max_bytes);
    f.read(s.data(), static_cast<std::streamsize>(max_bytes));
    s.resize(static_cast<size_t>(f.gcount()));
  }
  MS_CHECK(!f.bad(), "{}: read error", path);
  return s;
}

// ---- shard writing ------------------------------------------------------------------------

struct SplitWriter {
  std::string out_dir, prefix;
  size_t shard_tokens;
  bool wide;  // uint32 ids (a vocabulary over 65536), else uint16
  std::vector<uint32_t> buf;
  std::vector<std::string> shards;
  size_t total = 0;
  void flush(bool final) {
    while (buf.size() >= shard_tokens || (final && !buf.empty())) {
      size_t n = std::min(buf.size(), shard_tokens);
      std::string path =
          (fs::path(out_dir) / fmt::format("{}_{:06d}.bin", prefix, shards.size())).string();
      if (wide) {
        write_token_shard_u32(path, std::vector<uint32_t>(buf.begin(), buf.begin() + n));
      } else {
        write_token_shard(path, std::vector<uint16_t>(buf.begin(), buf.begin() + n));
      }
      buf.erase(buf.begin(), buf.begin() + n);
      shards.push_back(path);
    }
  }
  void add(const std::vector<int>& ids) {
    for (int id : ids) buf.push_back(static_cast<uint32_t>(id));
    total += ids.size();
    if (buf.size() >= shard_tokens) flush(false);
  }
};

// 1. Files, in input order; directories walked recursively and sorted; hidden files skipped.
std::vector<std::string> input_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(in, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) found.push_back(it->path().string());
      }
      MS_CHECK(!ec, "prepare: cannot walk directory {}: {}", in, ec.message());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      MS_CHECK(fs::is_regular_file(in, ec), "prepare: input {} is neither a file nor a directory", in);
      files.push_back(in);
    }
  }
  return files;
}

// 3. Held-out rule: evenly spread, at least one when f > 0.
std::vector<char> held_out(size_t N, double f) {
  std::vector<char> is_val(N, 0);
  size_t n_val = 0;
  for (size_t i = 0; i < N; ++i) {
    is_val[i] = std::floor(static_cast<double>(i + 1) * f) > std::floor(static_cast<double>(i) * f);
    n_val += is_val[i];
  }
  if (f > 0 && n_val == 0) is_val[N - 1] = 1;
  return is_val;
}

// 4. Output directory: remove stale shards of an earlier run (they would match train_*.bin).
void prepare_output_dir(const std::string& out_dir) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  MS_CHECK(!ec && fs::is_directory(out_dir), "prepare: cannot create output directory {}: {}",
           out_dir, ec.message());
  const std::regex shard_name(R"((train|val)_\d{6}\.bin)");
  for (const auto& e : fs::directory_iterator(out_dir)) {
    if (e.is_regular_file() && std::regex_match(e.path().filename().string(), shard_name))
      fs::remove(e.path());
  }

}

// meta.json: what was prepared, from what, with the shards' checksums.
void write_meta(const PrepareOptions& opt, const PrepareResult& res, const Tokenizer& tok) {
  const std::string& format = res.format;
  auto names = [](const std::vector<std::string>& paths) {  // meta.json lists shards by file name
    std::vector<std::string> out;
    for (const auto& p : paths) out.push_back(fs::path(p).filename().string());
    return out;
  };
  nlohmann::json meta;
  meta["format"] = format;
  meta["tokenizer"] = tok.kind();
  if (const auto* hf = dynamic_cast<const HfTokenizer*>(&tok)) {
    meta["tokenizer_file"] = fs::absolute(hf->path()).lexically_normal().string();
    const std::string bytes = read_whole(hf->path());
    meta["tokenizer_xxh64"] = xxh64_hex(bytes.data(), bytes.size());
  } else {
    meta["tokenizer_dir"] = opt.tokenizer_dir;
    meta["eot"] = tok.document_separator();
  }
  meta["vocab_size"] = tok.vocab_size();
  meta["document_separator"] = {{"id", tok.document_separator()},
                                {"text", tok.decode_token(tok.document_separator())}};
  meta["token_bytes"] = tok.vocab_size() > 65536 ? 4 : 2;
  meta["inputs"] = opt.inputs;
  meta["val_fraction"] = opt.val_fraction;
  meta["shard_tokens"] = opt.shard_tokens;
  meta["train"] = {{"documents", res.train_documents.size()}, {"tokens", res.train_tokens},
                   {"shards", names(res.train_shards)}};
  meta["val"] = {{"documents", res.val_documents.size()}, {"tokens", res.val_tokens},
                 {"shards", names(res.val_shards)}, {"document_paths", res.val_documents}};
  meta["unigram_entropy_bits"] = res.unigram_entropy_bits;
  meta["unigram_entropy_nats"] = res.unigram_entropy_nats;
  record_shard_checksums(meta, res.train_shards);  // validate once: loaders check these, not every id
  record_shard_checksums(meta, res.val_shards);
  const std::string meta_text = meta.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  write_text_atomic((fs::path(opt.out_dir) / "meta.json").string(), meta_text);

}

}  // namespace

PrepareResult run_prepare(const PrepareOptions& opt) {
  const Stopwatch watch;
  auto secs = [&] { return watch.seconds(); };
  MS_CHECK(!opt.inputs.empty(), "prepare: no inputs given");
  MS_CHECK(!opt.out_dir.empty(), "prepare: no output directory given");
  MS_CHECK(opt.format == "auto" || opt.format == "text" || opt.format == "brown",
           "prepare: format '{}' is not one of auto, text, brown", opt.format);
  MS_CHECK(opt.val_fraction >= 0 && opt.val_fraction < 1,
           "prepare: val_fraction {} must be in [0, 1)", opt.val_fraction);
  MS_CHECK(opt.shard_tokens >= 1 && opt.shard_tokens < (1ull << 31),
           "prepare: shard_tokens {} must be in [1, 2^31)", opt.shard_tokens);

  std::vector<std::string> files = input_files(opt.inputs);
  MS_CHECK(!files.empty(), "prepare: the inputs hold no files");

  // 2. Resolve the format and the document list.
  std::vector<char> brownish(files.size());
  size_t n_brown = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    brownish[i] = looks_like_brown(read_whole(files[i], 64 * 1024));
    n_brown += brownish[i];
  }
  std::string format = opt.format;
  if (format == "auto") format = n_brown * 2 > files.size() ? "brown" : "text";
  std::vector<std::string> docs;
  std::vector<std::string> skipped;
  for (size_t i = 0; i < files.size(); ++i) {
    if (format == "brown" && !brownish[i]) skipped.push_back(files[i]);
    else docs.push_back(files[i]);
  }
  if (opt.verbose) {
    fmt::print("prepare: {} files, format {}: {} documents", files.size(), format, docs.size());
    if (!skipped.empty()) {
      fmt::print(", skipped {} not in word/tag form (", skipped.size());
      for (size_t i = 0; i < skipped.size() && i < 6; ++i)
        fmt::print("{}{}", i ? ", " : "", fs::path(skipped[i]).filename().string());
      fmt::print("{})", skipped.size() > 6 ? ", ..." : "");
    }
    fmt::print("\n");
    std::fflush(stdout);
  }
  MS_CHECK(!docs.empty(), "prepare: no documents (format {}; {} files skipped)", format, skipped.size());
  MS_CHECK(opt.val_fraction == 0 || docs.size() >= 2,
           "prepare: a validation split needs at least 2 documents (got {}); use val_fraction = 0",
           docs.size());

  const size_t N = docs.size();
  const std::vector<char> is_val = held_out(N, opt.val_fraction);

  prepare_output_dir(opt.out_dir);

  const std::unique_ptr<Tokenizer> tok_ptr = load_tokenizer(opt.tokenizer_file, opt.tokenizer_dir, opt.bos_token);
  const Tokenizer& tok = *tok_ptr;
  const bool wide = tok.vocab_size() > 65536;  // ids past uint16: llm.c's uint32 shards
  if (opt.verbose) {
    fmt::print("prepare: tokenizer {} ({}), {} tokens, documents start with {} ({}), {} shards\n", tok.kind(),
               opt.tokenizer_file.empty() ? opt.tokenizer_dir : opt.tokenizer_file, tok.vocab_size(),
               tok.document_separator(), tok.decode_token(tok.document_separator()), wide ? "uint32" : "uint16");
  }
  SplitWriter train{opt.out_dir, "train", opt.shard_tokens, wide, {}, {}, 0};
  SplitWriter val{opt.out_dir, "val", opt.shard_tokens, wide, {}, {}, 0};
  std::vector<uint64_t> counts(static_cast<size_t>(tok.vocab_size()), 0);
  PrepareResult res;
  res.format = format;

  // 5. Encode every document as [separator] + tokens and append it to its split.
  std::vector<int> ids;
  for (size_t i = 0; i < N; ++i) {
    std::string raw = read_whole(docs[i]);
    std::string text = format == "brown" ? brown_detokenize(raw) : std::move(raw);
    size_t bad = find_invalid_utf8(text);
    MS_CHECK(bad == std::string::npos, "prepare: {}: not valid UTF-8 at byte {}", docs[i], bad);
    ids.clear();
    ids.push_back(tok.document_separator());
    tok.encode_append(text, ids);
    if (is_val[i]) {
      val.add(ids);
      res.val_documents.push_back(docs[i]);
    } else {
      for (int id : ids) ++counts[id];
      train.add(ids);
      res.train_documents.push_back(docs[i]);
    }
    if (opt.verbose && ((i + 1) * 10 / N != i * 10 / N || i + 1 == N)) {  // every 10%
      fmt::print("prepare: {:>6}/{} documents, {} train + {} val tokens, {:.1f} s\n", i + 1, N,
                 train.total, val.total, secs());
      std::fflush(stdout);
    }
  }
  train.flush(true);
  val.flush(true);

  res.train_tokens = train.total;
  res.val_tokens = val.total;
  res.train_shards = train.shards;
  res.val_shards = val.shards;
  double H = 0;
  for (uint64_t c : counts) {
    if (c == 0) continue;
    double p = static_cast<double>(c) / static_cast<double>(train.total);
    H -= p * std::log2(p);
  }
  res.unigram_entropy_bits = H;
  res.unigram_entropy_nats = H * std::log(2.0);

  write_meta(opt, res, tok);

  if (opt.verbose) {
    fmt::print("prepare: train {} documents, {} tokens in {} shards; val {} documents, {} tokens in "
               "{} shards\n",
               res.train_documents.size(), res.train_tokens, res.train_shards.size(),
               res.val_documents.size(), res.val_tokens, res.val_shards.size());
    fmt::print("prepare: unigram entropy of train tokens {:.4f} bits/token = {:.4f} nats/token\n",
               res.unigram_entropy_bits, res.unigram_entropy_nats);
    fmt::print("prepare: wrote {} in {:.1f} s\n", opt.out_dir, secs());
    std::fflush(stdout);
  }
  return res;
}

std::optional<PreparedTokenizer> read_prepared_tokenizer(const std::string& meta_path) {
  std::error_code ec;
  if (!fs::is_regular_file(meta_path, ec)) return std::nullopt;
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(read_whole(meta_path));
  } catch (const nlohmann::json::exception& e) {
    MS_FAIL("{}: not valid JSON: {}", meta_path, e.what());
  }
  if (!meta.is_object() || !meta.contains("tokenizer")) return std::nullopt;
  PreparedTokenizer t;
  try {
    t.kind = meta.at("tokenizer").get<std::string>();
    t.vocab_size = meta.at("vocab_size").get<int>();
    t.location = meta.value(t.kind == "hf-bpe" ? "tokenizer_file" : "tokenizer_dir", std::string());
    if (meta.contains("document_separator")) {
      t.separator = meta["document_separator"].at("id").get<int>();
      t.separator_text = meta["document_separator"].at("text").get<std::string>();
    } else {
      t.separator = meta.value("eot", -1);
    }
  } catch (const nlohmann::json::exception& e) {
    MS_FAIL("{}: the tokenizer fields are not as prepare writes them: {}", meta_path, e.what());
  }
  MS_CHECK(t.kind == "gpt2" || t.kind == "hf-bpe", "{}: tokenizer '{}' is not one prepare writes (gpt2, hf-bpe)",
           meta_path, t.kind);
  return t;
}

std::unique_ptr<Tokenizer> load_prepared_tokenizer(const PreparedTokenizer& t, const std::string& gpt2_dir) {
  std::unique_ptr<Tokenizer> tok =
      t.kind == "hf-bpe" ? load_tokenizer(t.location, "", t.separator_text)
                         : load_tokenizer("", t.location.empty() ? gpt2_dir : t.location);
  MS_CHECK(tok->vocab_size() == t.vocab_size, "tokenizer {}: {} tokens, but the data was prepared with {} (the "
           "tokenizer changed since prepare)", t.location.empty() ? gpt2_dir : t.location, tok->vocab_size(),
           t.vocab_size);
  MS_CHECK(t.separator < 0 || tok->document_separator() == t.separator, "tokenizer {}: separates documents with id "
           "{}, but the data was prepared with {}", t.location, tok->document_separator(), t.separator);
  return tok;
}

}  // namespace ms
