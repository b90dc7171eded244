// hf_tokenizer_json: reads a Hugging Face tokenizer.json into the plain description HfTokenizer
// builds from (hf_tokenizer.h lists what is supported). Guarantees: what is returned is a
// byte-level BPE this reader implements exactly; anything else (malformed JSON, a missing file, a
// field of an unsupported kind or value) is an ms::Error naming the file and the JSON field
// ("tokenizer.json: model.byte_fallback = true is not supported ..."). Pure: reads one file.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ms::hf {

struct SplitSpec {
  std::string pattern;  // a PCRE2 pattern, or a literal string
  bool literal = false;
  std::string field;    // where it was read ("pre_tokenizer.pretokenizers[0].pattern.Regex")
};

struct AddedTokenSpec {
  int64_t id = 0;
  std::string content;
  bool normalized = false;  // matched after the non-normalized ones (Hugging Face's second pass)
  bool special = false;
};

struct TokenizerSpec {
  std::string file;
  std::vector<std::pair<std::string, int64_t>> vocab;  // token (byte-alphabet form) -> id
  std::vector<std::array<std::string, 2>> merges;      // in rank order
  bool ignore_merges = false;
  std::vector<SplitSpec> splits;       // applied in order, each to every piece of the previous
  std::vector<AddedTokenSpec> added;   // in file order
  std::string template_bos;            // the post_processor's leading SpecialToken ("" = none)
  int64_t template_bos_id = -1;        // its id there
};

// Reads and checks `file` (a tokenizer.json).
TokenizerSpec read_tokenizer_json(const std::string& file);

}  // namespace ms::hf
