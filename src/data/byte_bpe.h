// byte_bpe: the core shared by the byte-level BPE tokenizers (GPT-2's tables in tokenizer.h and
// Hugging Face's tokenizer.json in hf_tokenizer.h): GPT-2's byte <-> unicode alphabet
// (bytes_to_unicode), a PCRE2 split pattern (UTF + UCP, JIT when available) and the merge loop
// over a piece's bytes (a min-heap on (rank, position): the lowest rank first, the leftmost on
// ties, which is both openai/gpt-2's merge-all-occurrences loop and Hugging Face's Word::merge_all),
// with a per-piece cache. Guarantees: every piece of valid UTF-8 text maps to ids; the split
// covers the text exactly (in kStrict mode a gap is an error, in kIsolated mode gaps are pieces);
// everything here is thread-safe once built (encode_piece locks its cache).
#pragma once
#include <cstdint>
#include <functional>  // std::hash, std::equal_to
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ms::bpe {

// GPT-2's split pattern (openai/gpt-2 encoder.py; Hugging Face's ByteLevel with use_regex = true).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others to 256 + n.
struct ByteAlphabet {
  uint32_t byte_to_cp[256];
  std::unordered_map<uint32_t, uint8_t> cp_to_byte;
  // The raw bytes of a token written in the alphabet; false (and *bad = the first code point
  // outside it) when some character is not a byte character. `s` must be valid UTF-8.
  bool to_bytes(std::string_view s, std::string& raw, uint32_t* bad = nullptr) const;
  // The alphabet form of raw bytes (UTF-8).
  std::string to_alphabet(std::string_view raw) const;
};
const ByteAlphabet& byte_alphabet();

// Decodes one UTF-8 code point at s[i] (input already valid); advances i.
uint32_t next_cp(std::string_view s, size_t& i);
// Appends cp as UTF-8.
void append_utf8(std::string& s, uint32_t cp);

// A compiled split pattern. Matches are searched left to right; an empty match is skipped (the
// search moves on one character).
class SplitPattern {
 public:
  enum class Gaps { kStrict, kIsolated };  // text between matches: an error, or a piece of its own
  // Compiles `pattern` (a PCRE2 regular expression, or a literal string when literal = true).
  // Returns nullptr and sets *error ("at offset N: message") when it does not compile.
  static std::unique_ptr<SplitPattern> compile(std::string_view pattern, bool literal, std::string* error);
  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;

  // Appends the pieces of `text` (valid UTF-8, already checked) to `out`, in order; they cover it.
  void split(std::string_view text, Gaps gaps, std::vector<std::string_view>& out) const;

 private:
  SplitPattern() = default;
  void* re_ = nullptr;  // pcre2_code*
  bool jit_ = false;
};

// The merge table and the merge loop.
class Merger {
 public:
  // byte_id[b]: the id of the single byte b.
  explicit Merger(const int byte_id[256]);
  // Adds the merge (left, right) -> merged at the next rank. keep_first: a repeated pair keeps
  // its first (lowest) rank (GPT-2's encoder); otherwise the last one wins (Hugging Face's
  // HashMap collect). Returns false when the pair was already there.
  bool add(int left, int right, int merged, bool keep_first);
  size_t size() const { return merges_.size(); }
  // ignore_merges (Hugging Face): a piece whose alphabet form is a whole vocabulary token maps to
  // it without merging. `whole`: raw bytes -> id.
  void set_whole_tokens(std::unordered_map<std::string, int> whole);

  // The ids of one piece (raw bytes, non-empty), appended to out; cached.
  void encode_piece(std::string_view piece, std::vector<int>& out) const;

 private:
  struct Merge {
    uint32_t rank;
    int merged;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  const Merge* find(int a, int b) const;
  void merge_loop(std::string_view piece, std::vector<int>& out) const;

  int byte_id_[256] = {};
  uint32_t next_rank_ = 0;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int, StringHash, std::equal_to<>> whole_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> cache_;
};

}  // namespace ms::bpe
