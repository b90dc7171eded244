// hf_tokenizer: builds the byte-level BPE of a tokenizer.json (read by hf_tokenizer_json.cpp) on
// the shared core (byte_bpe.h): added-token matching, the Split patterns, the merges, decoding.
#include "data/hf_tokenizer.h"

#include <algorithm>   // std::sort, std::max
#include <filesystem>  // std::filesystem
#include <optional>    // std::optional
#include <unordered_map>

#include "base/check.h"
#include "data/byte_bpe.h"
#include "data/hf_tokenizer_json.h"

namespace ms {

namespace fs = std::filesystem;

namespace {

constexpr int kNoToken = -1;

// Added tokens of one pass, found leftmost-longest (Hugging Face's Aho-Corasick match kind).
struct AddedMatcher {
  std::vector<std::pair<std::string, int>> tokens;  // content, id; by length, longest first
  std::vector<int> by_first[256];                   // indices into tokens, by first byte

  void build() {
    std::stable_sort(tokens.begin(), tokens.end(),
                     [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
    for (int i = 0; i < static_cast<int>(tokens.size()); ++i)
      by_first[static_cast<unsigned char>(tokens[i].first[0])].push_back(i);
  }

  // Cuts `text` into segments: (text, kNoToken) for plain text, (content, id) for added tokens.
  void split(std::string_view text, std::vector<std::pair<std::string_view, int>>& out) const {
    if (tokens.empty()) {
      out.emplace_back(text, kNoToken);
      return;
    }
    size_t plain = 0;
    for (size_t pos = 0; pos < text.size();) {
      int hit = -1;
      for (int i : by_first[static_cast<unsigned char>(text[pos])])
        if (text.substr(pos).starts_with(tokens[i].first)) {
          hit = i;
          break;
        }
      if (hit < 0) {
        ++pos;
        continue;
      }
      if (pos > plain) out.emplace_back(text.substr(plain, pos - plain), kNoToken);
      out.emplace_back(text.substr(pos, tokens[hit].first.size()), tokens[hit].second);
      pos += tokens[hit].first.size();
      plain = pos;
    }
    if (plain < text.size()) out.emplace_back(text.substr(plain), kNoToken);
  }
};

// The bytes Hugging Face's ByteLevel decoder gives for a token: its byte characters, or its text
// when any character is not one.
std::string token_bytes(const std::string& token) {
  std::string raw;
  return bpe::byte_alphabet().to_bytes(token, raw) ? raw : token;
}

}  // namespace

struct HfTokenizer::Impl {
  std::string file;
  std::vector<std::string> bytes;        // id -> decoded bytes
  std::vector<char> present;             // id -> has a token
  std::unordered_map<std::string, int> text_to_id;  // added contents, then vocabulary bytes
  std::optional<bpe::Merger> merger;
  std::vector<std::unique_ptr<bpe::SplitPattern>> splits;
  AddedMatcher raw_pass, normalized_pass;
  int separator = -1;

  void build_vocab(const hf::TokenizerSpec& spec, std::unordered_map<std::string, int>& vocab_ids);
  void build_merges(const hf::TokenizerSpec& spec, const std::unordered_map<std::string, int>& vocab_ids);
  void build_added(const hf::TokenizerSpec& spec, const std::unordered_map<std::string, int>& vocab_ids);
  void choose_separator(const hf::TokenizerSpec& spec, const std::string& bos_token);
};

void HfTokenizer::Impl::build_vocab(const hf::TokenizerSpec& spec, std::unordered_map<std::string, int>& vocab_ids) {
  int64_t max_id = 0;
  for (const auto& [token, id] : spec.vocab) max_id = std::max(max_id, id);
  for (const auto& a : spec.added) max_id = std::max(max_id, a.id);
  bytes.assign(static_cast<size_t>(max_id) + 1, std::string());
  present.assign(static_cast<size_t>(max_id) + 1, 0);
  vocab_ids.reserve(spec.vocab.size() * 2);
  for (const auto& [token, id] : spec.vocab) {
    vocab_ids.emplace(token, static_cast<int>(id));
    bytes[id] = token_bytes(token);
    present[id] = 1;
  }
}

void HfTokenizer::Impl::build_merges(const hf::TokenizerSpec& spec,
                                     const std::unordered_map<std::string, int>& vocab_ids) {
  const bpe::ByteAlphabet& alphabet = bpe::byte_alphabet();
  int byte_id[256];
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    bpe::append_utf8(ch, alphabet.byte_to_cp[b]);
    auto it = vocab_ids.find(ch);
    MS_CHECK(it != vocab_ids.end(), "{}: model.vocab: no token for byte 0x{:02X} ('{}'); a byte-level BPE needs all 256",
             file, b, ch);
    byte_id[b] = it->second;
  }
  bpe::Merger& m = merger.emplace(byte_id);
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    const auto& [a, b] = spec.merges[i];
    auto find = [&](const std::string& t, const char* what) {
      auto it = vocab_ids.find(t);
      MS_CHECK(it != vocab_ids.end(), "{}: model.merges[{}] ('{} {}'): {} '{}' is not in model.vocab", file, i, a, b,
               what, t);
      return it->second;
    };
    const int ia = find(a, "token"), ib = find(b, "token"), im = find(a + b, "the merged token");
    m.add(ia, ib, im, /*keep_first=*/false);  // a repeated pair takes its last rank (Hugging Face)
  }
  if (spec.ignore_merges) {
    std::unordered_map<std::string, int> whole;
    std::string raw;
    for (const auto& [token, id] : spec.vocab)
      if (alphabet.to_bytes(token, raw)) whole.emplace(raw, static_cast<int>(id));
    m.set_whole_tokens(std::move(whole));
  }
}

// Ids as Hugging Face assigns them when it reads added_tokens: a vocabulary token keeps its id,
// a new one gets the next id after the vocabulary and the earlier added tokens.
void HfTokenizer::Impl::build_added(const hf::TokenizerSpec& spec,
                                    const std::unordered_map<std::string, int>& vocab_ids) {
  std::unordered_map<std::string, int> added_ids;
  int64_t max_added = -1;
  const int64_t n_vocab = static_cast<int64_t>(spec.vocab.size());
  for (size_t i = 0; i < spec.added.size(); ++i) {
    const hf::AddedTokenSpec& a = spec.added[i];
    int64_t want;
    if (auto v = vocab_ids.find(a.content); v != vocab_ids.end()) want = v->second;
    else if (auto d = added_ids.find(a.content); d != added_ids.end()) want = d->second;
    else want = max_added < 0 ? n_vocab : (max_added >= n_vocab ? max_added + 1 : n_vocab);
    MS_CHECK(a.id == want, "{}: added_tokens[{}] ('{}'): id {}, but Hugging Face gives it id {} (the vocabulary's "
             "id of that text, else the next id after the vocabulary and the earlier added tokens)",
             file, i, a.content, a.id, want);
    if (!added_ids.count(a.content)) {
      MS_CHECK(!present[a.id] || vocab_ids.count(a.content), "{}: added_tokens[{}] ('{}'): id {} is already a "
               "vocabulary token's", file, i, a.content, a.id);
      added_ids.emplace(a.content, static_cast<int>(a.id));
      (a.normalized ? normalized_pass : raw_pass).tokens.emplace_back(a.content, static_cast<int>(a.id));
    }
    max_added = std::max(max_added, a.id);
    bytes[a.id] = token_bytes(a.content);
    present[a.id] = 1;
  }
  raw_pass.build();
  normalized_pass.build();
  for (const auto& [content, id] : added_ids) text_to_id.emplace(content, id);
  for (int id = 0; id < static_cast<int>(bytes.size()); ++id)
    if (present[id]) text_to_id.emplace(bytes[id], id);  // added contents stay first
}

void HfTokenizer::Impl::choose_separator(const hf::TokenizerSpec& spec, const std::string& bos_token) {
  auto id_of = [&](const std::string& t) {
    auto it = text_to_id.find(t);
    return it == text_to_id.end() ? -1 : it->second;
  };
  if (!bos_token.empty()) {
    separator = id_of(bos_token);
    MS_CHECK(separator >= 0, "{}: the chosen BOS token '{}' is neither an added token nor a vocabulary token", file,
             bos_token);
  } else if (!spec.template_bos.empty()) {
    separator = id_of(spec.template_bos);
    MS_CHECK(separator >= 0 && separator == spec.template_bos_id,
             "{}: post_processor: the template's BOS '{}' (id {}) is not that token of the vocabulary or added_tokens",
             file, spec.template_bos, spec.template_bos_id);
  } else {
    separator = id_of("<|endoftext|>");
    MS_CHECK(separator >= 0, "{}: no document separator: the post_processor has no BOS and there is no <|endoftext|> "
             "token; name one (prepare --bos-token TEXT)", file);
  }
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

std::string hf_tokenizer_file(const std::string& path) {
  MS_CHECK(!path.empty(), "tokenizer: no tokenizer.json given");
  std::error_code ec;
  return fs::is_directory(path, ec) ? (fs::path(path) / "tokenizer.json").string() : path;
}

HfTokenizer HfTokenizer::load(const std::string& path, const std::string& bos_token) {
  const std::string file = hf_tokenizer_file(path);
  const hf::TokenizerSpec spec = hf::read_tokenizer_json(file);
  auto impl = std::make_unique<Impl>();
  impl->file = file;
  std::unordered_map<std::string, int> vocab_ids;
  impl->build_vocab(spec, vocab_ids);
  impl->build_merges(spec, vocab_ids);
  impl->build_added(spec, vocab_ids);
  for (const hf::SplitSpec& s : spec.splits) {
    std::string err;
    impl->splits.push_back(bpe::SplitPattern::compile(s.pattern, s.literal, &err));
    MS_CHECK(impl->splits.back() != nullptr, "{}: {}: PCRE2 cannot compile the pattern {}", file, s.field, err);
  }
  impl->choose_separator(spec, bos_token);
  return HfTokenizer(std::move(impl));
}

void HfTokenizer::encode_append(std::string_view text, std::vector<int>& out) const {
  const size_t bad = find_invalid_utf8(text);
  MS_CHECK(bad == std::string_view::npos, "tokenizer: text is not valid UTF-8 at byte {} (0x{:02X})", bad,
           bad == std::string_view::npos ? 0 : static_cast<unsigned char>(text[bad]));
  const Impl& im = *impl_;
  std::vector<std::pair<std::string_view, int>> first, segments;
  im.raw_pass.split(text, first);
  for (const auto& seg : first) {
    if (seg.second == kNoToken) im.normalized_pass.split(seg.first, segments);
    else segments.push_back(seg);
  }
  std::vector<std::string_view> pieces, next;
  for (const auto& [seg, id] : segments) {
    if (id != kNoToken) {
      out.push_back(id);
      continue;
    }
    pieces.assign(1, seg);
    for (const auto& re : im.splits) {
      next.clear();
      for (std::string_view p : pieces) re->split(p, bpe::SplitPattern::Gaps::kIsolated, next);
      pieces.swap(next);
    }
    for (std::string_view p : pieces) im.merger->encode_piece(p, out);
  }
}

std::string HfTokenizer::decode_token(int id) const {
  MS_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id {} outside [0, {})", id, vocab_size());
  MS_CHECK(impl_->present[id], "tokenizer: token id {} is no token of {}", id, impl_->file);
  return impl_->bytes[id];
}

std::string HfTokenizer::decode(const std::vector<int>& ids) const {
  std::string out;
  for (int id : ids) {
    MS_CHECK(id >= 0 && id < vocab_size(), "tokenizer: token id {} outside [0, {})", id, vocab_size());
    MS_CHECK(impl_->present[id], "tokenizer: token id {} is no token of {}", id, impl_->file);
    out += impl_->bytes[id];
  }
  return out;
}

int HfTokenizer::vocab_size() const { return static_cast<int>(impl_->bytes.size()); }
int HfTokenizer::document_separator() const { return impl_->separator; }
const std::string& HfTokenizer::path() const { return impl_->file; }
std::string HfTokenizer::separator_text() const { return impl_->bytes[impl_->separator]; }

int HfTokenizer::token_id(std::string_view text) const {
  auto it = impl_->text_to_id.find(std::string(text));
  return it == impl_->text_to_id.end() ? -1 : it->second;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& hf_file, const std::string& gpt2_dir,
                                          const std::string& bos_token) {
  if (!hf_file.empty()) return std::make_unique<HfTokenizer>(HfTokenizer::load(hf_file, bos_token));
  MS_CHECK(bos_token.empty() || bos_token == "<|endoftext|>",
           "tokenizer: GPT-2's tables separate documents with <|endoftext|> only (BOS token '{}' asks for a "
           "tokenizer.json)", bos_token);
  return std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::load_dir(gpt2_dir));
}

}  // namespace ms
