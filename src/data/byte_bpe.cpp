// byte_bpe: the byte alphabet, the PCRE2 split pattern and the heap merge loop (see byte_bpe.h).
#include "data/byte_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>  // std::push_heap, std::pop_heap

#include "base/check.h"

namespace ms::bpe {

namespace {

constexpr size_t kMaxCacheEntries = 1u << 20;  // cleared when exceeded (bounded memory)

ByteAlphabet make_alphabet() {
  ByteAlphabet a;
  bool printable[256] = {};
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t n = 0;
  for (int b = 0; b < 256; ++b) a.byte_to_cp[b] = printable[b] ? static_cast<uint32_t>(b) : 256 + n++;
  for (int b = 0; b < 256; ++b) a.cp_to_byte[a.byte_to_cp[b]] = static_cast<uint8_t>(b);
  return a;
}

pcre2_code* code(void* p) { return static_cast<pcre2_code*>(p); }

}  // namespace

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet a = make_alphabet();
  return a;
}

bool ByteAlphabet::to_bytes(std::string_view s, std::string& raw, uint32_t* bad) const {
  raw.clear();
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = next_cp(s, i);
    auto it = cp_to_byte.find(cp);
    if (it == cp_to_byte.end()) {
      if (bad) *bad = cp;
      return false;
    }
    raw.push_back(static_cast<char>(it->second));
  }
  return true;
}

std::string ByteAlphabet::to_alphabet(std::string_view raw) const {
  std::string out;
  for (char c : raw) append_utf8(out, byte_to_cp[static_cast<unsigned char>(c)]);
  return out;
}

uint32_t next_cp(std::string_view s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += len;
  return cp;
}

void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
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

// ---- SplitPattern -----------------------------------------------------------------------------

std::unique_ptr<SplitPattern> SplitPattern::compile(std::string_view pattern, bool literal, std::string* error) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0u);
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &err,
                                 &err_off, nullptr);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    if (error) *error = "at offset " + std::to_string(err_off) + ": " + reinterpret_cast<char*>(msg);
    return nullptr;
  }
  std::unique_ptr<SplitPattern> p(new SplitPattern());
  p->re_ = re;
  p->jit_ = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  return p;
}

SplitPattern::~SplitPattern() {
  if (re_) pcre2_code_free(code(re_));
}

void SplitPattern::split(std::string_view text, Gaps gaps, std::vector<std::string_view>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code(re_), nullptr);
  MS_CHECK(md != nullptr, "tokenizer: out of memory for PCRE2 match data");
  struct Free {
    pcre2_match_data* md;
    ~Free() { pcre2_match_data_free(md); }
  } free_md{md};
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t off = 0;     // next search start
  size_t piece = 0;   // start of the text not yet in a piece
  while (off < n) {
    int rc = jit_ ? pcre2_jit_match(code(re_), subject, n, off, 0, md, nullptr) : -1;
    if (rc < 0) rc = pcre2_match(code(re_), subject, n, off, PCRE2_NO_UTF_CHECK, md, nullptr);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (gaps == Gaps::kStrict) {
      MS_CHECK(rc > 0, "tokenizer: pre-tokenizer failed at byte {} (PCRE2 code {})", off, rc);
      MS_CHECK(ov[0] == off && ov[1] > off, "tokenizer: pre-tokenizer skipped bytes {}..{}", off, ov[0]);
      out.push_back(text.substr(off, ov[1] - off));
      off = piece = ov[1];
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    MS_CHECK(rc > 0, "tokenizer: pre-tokenizer failed at byte {} (PCRE2 code {})", off, rc);
    if (ov[1] == ov[0]) {  // an empty match: search again one character further
      off = ov[0];
      if (off < n) next_cp(text, off);
      continue;
    }
    if (ov[0] > piece) out.push_back(text.substr(piece, ov[0] - piece));
    out.push_back(text.substr(ov[0], ov[1] - ov[0]));
    off = piece = ov[1];
  }
  if (piece < n) out.push_back(text.substr(piece));
}

// ---- Merger -----------------------------------------------------------------------------------

Merger::Merger(const int byte_id[256]) { std::copy(byte_id, byte_id + 256, byte_id_); }

bool Merger::add(int left, int right, int merged, bool keep_first) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  const Merge m{next_rank_++, merged};
  auto [it, inserted] = merges_.emplace(key, m);
  if (!inserted && !keep_first) it->second = m;
  return inserted;
}

void Merger::set_whole_tokens(std::unordered_map<std::string, int> whole) {
  ignore_merges_ = true;
  whole_.clear();
  for (auto& [k, v] : whole) whole_.emplace(k, v);
}

const Merger::Merge* Merger::find(int a, int b) const {
  auto it = merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b));
  return it == merges_.end() ? nullptr : &it->second;
}

// BPE of one piece: repeatedly merge the adjacent pair of lowest rank, leftmost first. A min-heap
// of (rank, position) with lazy invalidation; merged symbols keep their left position.
void Merger::merge_loop(std::string_view piece, std::vector<int>& out) const {
  const int n = static_cast<int>(piece.size());
  std::vector<int> id(n), next(n), prev(n);
  for (int i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  std::vector<uint64_t> heap;  // (rank << 32 | pos), min-heap
  auto cmp = [](uint64_t a, uint64_t b) { return a > b; };
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Merge* m = find(id[pos], id[next[pos]])) {
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
    const Merge* m = find(id[pos], id[next[pos]]);
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

void Merger::encode_piece(std::string_view piece, std::vector<int>& out) const {
  if (ignore_merges_) {
    auto it = whole_.find(piece);
    if (it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> ids;
  merge_loop(piece, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(piece), std::move(ids));
}

}  // namespace ms::bpe
