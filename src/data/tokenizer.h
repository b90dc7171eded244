// tokenizer: GPT-2's byte-level BPE (openai/gpt-2 encoder.py), reading the original encoder.json
// and vocab.bpe. Text (UTF-8) is split by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PCRE2, UTF + UCP, JIT), each piece's bytes are merged by rank (lowest first, leftmost on ties,
// the same result as the reference's merge-all-occurrences loop) and mapped to ids. Results per
// piece are cached. Guarantees: decode(encode(x)) == x for every valid UTF-8 x; encode() rejects
// invalid UTF-8 naming the byte offset; "<|endoftext|>" inside text is ordinary text (as in
// GPT-2), the EOT id is only ever inserted by callers. encode() and decode() are thread-safe.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

class Gpt2Tokenizer {
 public:
  // Loads the tables; every problem (missing file, bad JSON, merge of unknown tokens) is an
  // ms::Error naming the file.
  static Gpt2Tokenizer load(const std::string& encoder_json, const std::string& vocab_bpe);
  // dir/encoder.json + dir/vocab.bpe (dir must not be empty: the application knows where its data is).
  static Gpt2Tokenizer load_dir(const std::string& dir);

  Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
  Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;
  ~Gpt2Tokenizer();

  std::vector<int> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<int>& out) const;  // appends to out
  std::string decode(const std::vector<int>& ids) const;
  std::string decode_token(int id) const;  // the raw bytes of one token (may be partial UTF-8)
  int vocab_size() const;                  // 50257 for GPT-2
  int eot() const;                         // id of <|endoftext|>: 50256 for GPT-2

 private:
  struct Impl;
  explicit Gpt2Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Offset of the first byte of the first character that is not valid UTF-8 (no overlongs,
// surrogates or code points > U+10FFFF; PCRE2's UTF-8 check), or std::string_view::npos when `s`
// is valid. Thread-safe.
size_t find_invalid_utf8(std::string_view s);

}  // namespace ms
