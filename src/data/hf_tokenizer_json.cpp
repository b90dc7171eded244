// hf_tokenizer_json: tokenizer.json -> TokenizerSpec, refusing what HfTokenizer does not implement.
#include "data/hf_tokenizer_json.h"

#include <fstream>        // std::ifstream
#include <initializer_list>
#include <sstream>        // std::stringstream
#include <unordered_map>  // std::unordered_map

#include <nlohmann/json.hpp>  // nlohmann::json

#include "base/check.h"
#include "data/byte_bpe.h"  // bpe::kGpt2Pattern

namespace ms::hf {

namespace {

using json = nlohmann::json;

// Errors name the file and the JSON field.
struct Ctx {
  const std::string& file;
  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    MS_FAIL("{}: {}: {}", file, field, msg);
  }
  // Every key of `obj` must be one of `known` or null: an unknown field could change the tokenization.
  void only_known(const json& obj, const std::string& where, std::initializer_list<const char*> known) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      bool ok = it.value().is_null();
      for (const char* k : known) ok = ok || it.key() == k;
      if (!ok) fail(where.empty() ? it.key() : where + "." + it.key(), "a field this reader does not know (it could change the tokenization)");
    }
  }
  bool flag(const json& obj, const std::string& where, const char* key, bool dflt) const {
    if (!obj.contains(key) || obj[key].is_null()) return dflt;
    if (!obj[key].is_boolean()) fail(where + "." + key, "expected true or false");
    return obj[key].get<bool>();
  }
  std::string text(const json& obj, const std::string& where, const char* key) const {
    if (!obj.contains(key) || !obj[key].is_string()) fail(where + "." + key, "missing or not a string");
    return obj[key].get<std::string>();
  }
  std::string type_of(const json& obj, const std::string& where) const {
    if (!obj.is_object()) fail(where, "expected an object");
    return text(obj, where, "type");
  }
};

std::string read_text(const std::string& file) {
  std::ifstream f(file, std::ios::binary);
  MS_CHECK(f.good(), "{}: cannot open the tokenizer file", file);
  std::stringstream ss;
  ss << f.rdbuf();
  MS_CHECK(!f.bad(), "{}: read error", file);
  return ss.str();
}

void read_normalizer(const Ctx& c, const json& root) {
  if (!root.contains("normalizer") || root["normalizer"].is_null()) return;
  const json& n = root["normalizer"];
  const std::string type = c.type_of(n, "normalizer");
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array() && n["normalizers"].empty()) return;
  c.fail("normalizer", "type '" + type + "' is not supported (only null: byte-level BPE reads the text as it is)");
}

void read_vocab(const Ctx& c, const json& model, TokenizerSpec& spec) {
  if (!model.contains("vocab") || !model["vocab"].is_object() || model["vocab"].empty())
    c.fail("model.vocab", "missing or not a non-empty object of token -> id");
  std::unordered_map<int64_t, const std::string*> by_id;
  spec.vocab.reserve(model["vocab"].size());
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() >= (1ll << 31) - 1)
      c.fail("model.vocab", "token '" + it.key() + "' has an id that is not an integer in [0, 2^31 - 1)");
    spec.vocab.emplace_back(it.key(), it.value().get<int64_t>());
  }
  for (const auto& [token, id] : spec.vocab) {
    auto [at, fresh] = by_id.emplace(id, &token);
    if (!fresh) c.fail("model.vocab", "tokens '" + *at->second + "' and '" + token + "' both have id " + std::to_string(id));
  }
}

void read_merges(const Ctx& c, const json& model, TokenizerSpec& spec) {
  if (!model.contains("merges") || !model["merges"].is_array()) c.fail("model.merges", "missing or not an array");
  const json& merges = model["merges"];
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {  // "a b": exactly one space (Hugging Face splits on ' ' into two parts)
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        c.fail(field, "'" + s + "' is not two tokens separated by one space");
      spec.merges.push_back({s.substr(0, sp), s.substr(sp + 1)});
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.push_back({m[0].get<std::string>(), m[1].get<std::string>()});
    } else {
      c.fail(field, "expected \"a b\" or [\"a\", \"b\"]");
    }
  }
}

void read_model(const Ctx& c, const json& root, TokenizerSpec& spec) {
  if (!root.contains("model")) c.fail("model", "missing");
  const json& model = root["model"];
  const std::string type = c.type_of(model, "model");
  if (type != "BPE") c.fail("model.type", "'" + type + "' is not supported (only 'BPE')");
  c.only_known(model, "model", {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                                "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"});
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    c.fail("model.dropout", model["dropout"].dump() + " is not supported (only null: no BPE dropout)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!model.contains(key) || model[key].is_null()) continue;
    if (!model[key].is_string() || !model[key].get<std::string>().empty())
      c.fail(std::string("model.") + key, model[key].dump() + " is not supported (only null or \"\")");
  }
  if (c.flag(model, "model", "byte_fallback", false))
    c.fail("model.byte_fallback", "true is not supported (byte-level BPE has a token for every byte)");
  if (model.contains("unk_token") && !model["unk_token"].is_null() && !model["unk_token"].is_string())
    c.fail("model.unk_token", "expected null or a string");  // never used: every byte has a token
  c.flag(model, "model", "fuse_unk", false);
  spec.ignore_merges = c.flag(model, "model", "ignore_merges", false);
  read_vocab(c, model, spec);
  read_merges(c, model, spec);
}

// ByteLevel as a pre-tokenizer: no prefix space; use_regex (absent = true) adds GPT-2's pattern.
void read_byte_level(const Ctx& c, const json& p, const std::string& where, TokenizerSpec& spec) {
  c.only_known(p, where, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  if (c.flag(p, where, "add_prefix_space", false))
    c.fail(where + ".add_prefix_space", "true is not supported (only false: text is not given a leading space)");
  c.flag(p, where, "trim_offsets", true);  // offsets only
  if (c.flag(p, where, "use_regex", true))
    spec.splits.push_back({bpe::kGpt2Pattern, false, where + ".use_regex"});
}

void read_split(const Ctx& c, const json& p, const std::string& where, TokenizerSpec& spec) {
  c.only_known(p, where, {"type", "pattern", "behavior", "invert"});
  const std::string behavior = c.text(p, where, "behavior");
  if (behavior != "Isolated") c.fail(where + ".behavior", "'" + behavior + "' is not supported (only 'Isolated')");
  if (c.flag(p, where, "invert", false)) c.fail(where + ".invert", "true is not supported (only false)");
  if (!p.contains("pattern") || !p["pattern"].is_object() || p["pattern"].size() != 1)
    c.fail(where + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
  const auto it = p["pattern"].begin();
  if ((it.key() != "Regex" && it.key() != "String") || !it.value().is_string() || it.value().get<std::string>().empty())
    c.fail(where + ".pattern", "expected {\"Regex\": \"...\"} or {\"String\": \"...\"} with a non-empty string");
  spec.splits.push_back({it.value().get<std::string>(), it.key() == "String", where + ".pattern." + it.key()});
}

void read_pre_tokenizer(const Ctx& c, const json& root, TokenizerSpec& spec) {
  if (!root.contains("pre_tokenizer") || root["pre_tokenizer"].is_null())
    c.fail("pre_tokenizer", "null is not supported (a byte-level BPE needs a ByteLevel pre-tokenizer)");
  const json& p = root["pre_tokenizer"];
  const std::string type = c.type_of(p, "pre_tokenizer");
  if (type == "ByteLevel") return read_byte_level(c, p, "pre_tokenizer", spec);
  if (type != "Sequence")
    c.fail("pre_tokenizer.type", "'" + type + "' is not supported (only ByteLevel, or a Sequence of Split ... ByteLevel)");
  c.only_known(p, "pre_tokenizer", {"type", "pretokenizers"});
  if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array() || p["pretokenizers"].empty())
    c.fail("pre_tokenizer.pretokenizers", "missing or empty");
  const json& seq = p["pretokenizers"];
  for (size_t i = 0; i < seq.size(); ++i) {
    const std::string where = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
    const std::string t = c.type_of(seq[i], where);
    const bool last = i + 1 == seq.size();
    if (t == "Split" && !last) {
      read_split(c, seq[i], where, spec);
    } else if (t == "ByteLevel" && last) {
      read_byte_level(c, seq[i], where, spec);
    } else {
      c.fail(where + ".type", "'" + t + "' is not supported here (only Split pre-tokenizers followed by one final ByteLevel)");
    }
  }
}

void read_decoder(const Ctx& c, const json& root) {
  if (!root.contains("decoder") || root["decoder"].is_null())
    c.fail("decoder", "null is not supported (only ByteLevel)");
  const std::string type = c.type_of(root["decoder"], "decoder");
  if (type != "ByteLevel") c.fail("decoder.type", "'" + type + "' is not supported (only ByteLevel)");
}

// TemplateProcessing: the SpecialToken that opens `single` is the BOS.
void read_template(const Ctx& c, const json& p, const std::string& where, TokenizerSpec& spec) {
  if (!p.contains("single") || !p["single"].is_array() || p["single"].empty()) return;
  const json& first = p["single"][0];
  if (!first.is_object() || !first.contains("SpecialToken")) return;
  const json& st = first["SpecialToken"];
  if (!st.is_object() || !st.contains("id") || !st["id"].is_string()) c.fail(where + ".single[0].SpecialToken.id", "missing");
  const std::string name = st["id"].get<std::string>();
  const std::string field = where + ".special_tokens[\"" + name + "\"]";
  if (!p.contains("special_tokens") || !p["special_tokens"].is_object() || !p["special_tokens"].contains(name))
    c.fail(field, "missing (the single template names it)");
  const json& entry = p["special_tokens"][name];
  if (!entry.is_object() || !entry.contains("ids")) c.fail(field + ".ids", "missing");
  const json& ids = entry["ids"];
  if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer())
    c.fail(field + ".ids", "a BOS of other than one id is not supported");
  spec.template_bos = name;
  spec.template_bos_id = ids[0].get<int64_t>();
}

void read_post_processor(const Ctx& c, const json& root, TokenizerSpec& spec) {
  if (!root.contains("post_processor") || root["post_processor"].is_null()) return;
  const json& p = root["post_processor"];
  const std::string type = c.type_of(p, "post_processor");
  auto one = [&](const json& q, const std::string& where) {
    const std::string t = c.type_of(q, where);
    if (t == "TemplateProcessing") read_template(c, q, where, spec);
    else if (t != "ByteLevel")
      c.fail(where + ".type", "'" + t + "' is not supported (only ByteLevel and TemplateProcessing)");
  };
  if (type != "Sequence") return one(p, "post_processor");
  if (!p.contains("processors") || !p["processors"].is_array()) c.fail("post_processor.processors", "missing");
  for (size_t i = 0; i < p["processors"].size(); ++i)
    one(p["processors"][i], "post_processor.processors[" + std::to_string(i) + "]");
}

void read_added_tokens(const Ctx& c, const json& root, TokenizerSpec& spec) {
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
  if (!root["added_tokens"].is_array()) c.fail("added_tokens", "expected an array");
  const json& added = root["added_tokens"];
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json& a = added[i];
    if (!a.is_object()) c.fail(where, "expected an object");
    c.only_known(a, where, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    AddedTokenSpec t;
    t.content = c.text(a, where, "content");
    if (t.content.empty()) c.fail(where + ".content", "empty");
    if (!a.contains("id") || !a["id"].is_number_integer() || a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() >= (1ll << 31) - 1)
      c.fail(where + ".id", "missing or not an integer in [0, 2^31 - 1)");
    t.id = a["id"].get<int64_t>();
    for (const char* key : {"single_word", "lstrip", "rstrip"})
      if (c.flag(a, where, key, false))
        c.fail(where + "." + key, "true is not supported ('" + t.content + "' is matched exactly, as it is)");
    t.special = c.flag(a, where, "special", false);
    t.normalized = c.flag(a, where, "normalized", !t.special);
    spec.added.push_back(std::move(t));
  }
}

}  // namespace

TokenizerSpec read_tokenizer_json(const std::string& file) {
  const Ctx c{file};
  json root;
  try {
    root = json::parse(read_text(file));
  } catch (const json::exception& e) {
    MS_FAIL("{}: not valid JSON: {}", file, e.what());
  }
  if (!root.is_object()) c.fail("(top level)", "expected a JSON object");
  c.only_known(root, "", {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                          "post_processor", "decoder", "model"});
  TokenizerSpec spec;
  spec.file = file;
  read_normalizer(c, root);
  read_model(c, root, spec);
  read_pre_tokenizer(c, root, spec);
  read_decoder(c, root);
  read_post_processor(c, root, spec);
  read_added_tokens(c, root, spec);
  return spec;
}

}  // namespace ms::hf
