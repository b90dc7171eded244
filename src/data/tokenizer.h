// tokenizer: the interface every tokenizer of the data path implements (Tokenizer: what prepare
// and the sampling decode need), and GPT-2's byte-level BPE (openai/gpt-2 encoder.py), reading the
// original encoder.json and vocab.bpe. Text (UTF-8) is split by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PCRE2, UTF + UCP, JIT), each piece's bytes are merged by rank (lowest first, leftmost on ties,
// the same result as the reference's merge-all-occurrences loop) and mapped to ids (the shared
// core: byte_bpe.h). Results per piece are cached. Guarantees: decode(encode(x)) == x for every
// valid UTF-8 x; encode() rejects invalid UTF-8 naming the byte offset; "<|endoftext|>" inside text
// is ordinary text (as in GPT-2), the EOT id is only ever inserted by callers. encode() and
// decode() are thread-safe. A Hugging Face tokenizer.json is read by hf_tokenizer.h.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ms {

// A tokenizer as the data path uses it. encode_append / decode / decode_token are thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  std::vector<int> encode(std::string_view text) const;  // encode_append into a fresh vector
  // Appends the ids of `text` (valid UTF-8, else an ms::Error naming the byte offset) to out.
  virtual void encode_append(std::string_view text, std::vector<int>& out) const = 0;
  virtual std::string decode(const std::vector<int>& ids) const = 0;  // an id outside [0, V) is an error
  virtual std::string decode_token(int id) const = 0;  // the bytes of one token (may be partial UTF-8)
  virtual int vocab_size() const = 0;                  // V: every id is < V
  // The id `prepare` puts before every document (GPT-2: <|endoftext|>; Llama 3: <|begin_of_text|>).
  virtual int document_separator() const = 0;
  virtual std::string kind() const = 0;  // "gpt2" (encoder.json + vocab.bpe) or "hf-bpe" (tokenizer.json)
};

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Loads the tables; every problem (missing file, bad JSON, merge of unknown tokens) is an
  // ms::Error naming the file.
  static Gpt2Tokenizer load(const std::string& encoder_json, const std::string& vocab_bpe);
  // dir/encoder.json + dir/vocab.bpe (dir must not be empty: the application knows where its data is).
  static Gpt2Tokenizer load_dir(const std::string& dir);

  Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
  Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;
  ~Gpt2Tokenizer() override;

  void encode_append(std::string_view text, std::vector<int>& out) const override;  // appends to out
  std::string decode(const std::vector<int>& ids) const override;
  std::string decode_token(int id) const override;  // the raw bytes of one token (may be partial UTF-8)
  int vocab_size() const override;                  // 50257 for GPT-2
  int eot() const;                                  // id of <|endoftext|>: 50256 for GPT-2
  int document_separator() const override { return eot(); }
  std::string kind() const override { return "gpt2"; }

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
