// hf_tokenizer: a byte-level BPE read from a Hugging Face tokenizer.json (GPT-2's and Llama 3's
// style), so that text is tokenized in an imported model's own vocabulary. What is read:
//   - model: type "BPE", vocab (token -> id), merges ("a b" strings or [a, b] pairs; rank = index,
//     a repeated pair takes its last rank, as Hugging Face does), ignore_merges (a pre-token that
//     is a whole vocabulary token maps to it without merging);
//   - pre_tokenizer: a bare ByteLevel with use_regex = true (absent = true: GPT-2's pattern), or a
//     Sequence of Split {pattern: {Regex | String}, behavior "Isolated", invert false} ... ended by
//     a ByteLevel (use_regex false, or true for GPT-2's pattern after the Splits); each Split cuts
//     every piece into its matches and the text between them (PCRE2, UTF + UCP, JIT);
//   - added_tokens: matched in the text before pre-tokenization, leftmost-longest, first those with
//     normalized = false, then in what is left those with normalized = true (Hugging Face's two
//     passes), each mapped to its id; an id must be the one Hugging Face assigns (the vocabulary's
//     when the content is a vocabulary token, else the next after the vocabulary and the earlier
//     added tokens);
//   - decoder: ByteLevel (a token whose characters are all byte characters decodes to those bytes,
//     any other token to its UTF-8 text, as Hugging Face's ByteLevel decoder does);
//   - post_processor: null, ByteLevel, TemplateProcessing or a Sequence of them: only the BOS of
//     TemplateProcessing's `single` template is used (the document separator, below).
// The document separator (the id `prepare` puts before every document): the bos_token argument
// when given (an added token's content or a vocabulary token's text), else the SpecialToken that
// opens the post_processor's `single` template (Llama 3: <|begin_of_text|>), else <|endoftext|>
// (GPT-2), else an error. V = 1 + the largest id of the vocabulary and the added tokens.
// Not supported, each an ms::Error naming the file and the JSON field: a normalizer other than null
// (or an empty Sequence), another model type, byte_fallback, continuing_subword_prefix or
// end_of_word_suffix other than null / "", dropout other than null / 0, another pre-tokenizer, a
// Split behavior other than "Isolated" or invert = true, add_prefix_space = true, a pattern PCRE2
// does not compile, a decoder other than ByteLevel, another post-processor, lstrip / rstrip /
// single_word on an added token, a merge naming a token missing from the vocabulary, duplicate
// ids, a vocabulary without all 256 byte tokens, an unknown non-null field of the model or the file,
// malformed JSON, a missing file. encode_append / decode are thread-safe.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"  // Tokenizer

namespace ms {

class HfTokenizer final : public Tokenizer {
 public:
  // Reads `path` (a tokenizer.json, or a folder holding one). bos_token: the document separator's
  // text ("" = choose as above).
  static HfTokenizer load(const std::string& path, const std::string& bos_token = "");

  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer() override;

  void encode_append(std::string_view text, std::vector<int>& out) const override;
  std::string decode(const std::vector<int>& ids) const override;
  std::string decode_token(int id) const override;
  int vocab_size() const override;
  int document_separator() const override;
  std::string kind() const override { return "hf-bpe"; }

  const std::string& path() const;                 // the tokenizer.json read
  std::string separator_text() const;              // the separator's text ("<|begin_of_text|>")
  int token_id(std::string_view text) const;       // an added token's or a vocabulary token's id; -1 if none

 private:
  struct Impl;
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The tokenizer prepare and the tools use: a Hugging Face tokenizer.json when `hf_file` is not
// empty (a file or a folder with tokenizer.json; bos_token as above), else GPT-2's tables in
// `gpt2_dir` (bos_token must then be empty or "<|endoftext|>").
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& hf_file, const std::string& gpt2_dir,
                                          const std::string& bos_token = "");

// The tokenizer.json a path names: the path itself, or path/tokenizer.json for a folder.
std::string hf_tokenizer_file(const std::string& path);

}  // namespace ms
