// manifest.cpp: see manifest.h.
#include "ckpt/manifest.h"

#include <algorithm>  // std::sort
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "base/check.h"          // MS_CHECK, MS_FAIL
#include "base/json_fields.h"    // JsonFields
#include "model/param_layout.h"  // build_param_layout

namespace ms {

using nlohmann::json;

const char* state_kind_name(StateKind k) {
  switch (k) {
    case StateKind::kParam: return "param";
    case StateKind::kMoment1: return "exp_avg";
    case StateKind::kMoment2: return "exp_avg_sq";
  }
  return "?";
}

namespace {
// [model] keys that do not change what a checkpoint holds: the preset (a shorthand; the fields it
// sets are compared themselves) and activation recomputation (memory, not values).
bool checkpoint_neutral(const std::string& key) {
  return key == "preset" || key == "recompute" || key == "recompute_every";
}

std::string hash_of(const std::map<std::string, std::string>& fields) {
  std::string text;
  for (const auto& [k, v] : fields) text += k + "=" + v + "\n";
  return fmt::format("{:016x}", XXH64(text.data(), text.size(), 0));
}
}  // namespace

std::map<std::string, std::string> model_fields(const Config& c) {
  std::map<std::string, std::string> out;
  for (const FieldInfo& f : list_fields(c))
    if (f.key.starts_with("model.") && !checkpoint_neutral(f.key.substr(6))) out[f.key.substr(6)] = f.value;
  return out;
}

std::string model_config_hash(const ModelConfig& m) {
  Config c;
  c.model = m;
  return hash_of(model_fields(c));
}

namespace {

json entry_json(const ManifestEntry& e) {
  return {{"key", e.key}, {"tensor", e.tensor}, {"kind", state_kind_name(e.kind)}, {"parts", e.parts},
          {"part", e.part}, {"lo", e.lo}, {"hi", e.hi}};
}

json file_json(const ManifestFile& f) {
  json entries = json::array();
  for (const ManifestEntry& e : f.entries) entries.push_back(entry_json(e));
  return {{"name", f.name}, {"rank", f.rank}, {"dp", f.dp}, {"tp", f.tp}, {"pp", f.pp}, {"bytes", f.bytes},
          {"xxh64", f.xxh64}, {"entries", entries}};
}

StateKind kind_from(const JsonFields& e, const std::string& s) {
  for (StateKind k : kStateKinds)
    if (s == state_kind_name(k)) return k;
  e.fail("kind", fmt::format("= '{}' is not param, exp_avg or exp_avg_sq", s));
}

int int_field(const JsonFields& f, const char* key, int64_t lo, int64_t hi) {
  return static_cast<int>(f.integer(key, lo, hi));
}

ManifestFile file_from(const JsonFields& r) {
  ManifestFile f;
  f.name = r.text("name");
  if (f.name.empty() || f.name.find('/') != std::string::npos || f.name[0] == '.')
    r.fail("name", fmt::format("= '{}' is not a plain file name", f.name));
  f.rank = int_field(r, "rank", 0, INT32_MAX);
  f.dp = int_field(r, "dp", 0, INT32_MAX);
  f.tp = int_field(r, "tp", 0, INT32_MAX);
  f.pp = int_field(r, "pp", 0, INT32_MAX);
  f.bytes = r.unsigned_integer("bytes");
  f.xxh64 = r.text("xxh64");
  if (f.xxh64.size() != 16 || f.xxh64.find_first_not_of("0123456789abcdef") != std::string::npos)
    r.fail("xxh64", fmt::format("= '{}' is not 16 hex digits", f.xxh64));
  const json& entries = r.array("entries");
  std::set<std::string> keys;
  for (size_t i = 0; i < entries.size(); i++) {
    const JsonFields e(entries[i], r.where(), r.path_of(fmt::format("entries[{}]", i)));
    const std::string& p = e.path();
    ManifestEntry m;
    m.key = e.text("key");
    MS_CHECK(keys.insert(m.key).second, "{}: '{}': key '{}' appears twice in file {}", r.where(), p, m.key, f.name);
    m.tensor = e.text("tensor");
    m.kind = kind_from(e, e.text("kind"));
    m.parts = int_field(e, "parts", 1, 4096);
    m.part = int_field(e, "part", 0, m.parts - 1);
    m.lo = e.unsigned_integer("lo");
    m.hi = e.unsigned_integer("hi");
    MS_CHECK(m.lo < m.hi, "{}: '{}': empty or reversed range [{}, {})", r.where(), p, m.lo, m.hi);
    f.entries.push_back(std::move(m));
  }
  return f;
}

}  // namespace

std::string manifest_files_to_json(const std::vector<ManifestFile>& files) {
  json a = json::array();
  for (const ManifestFile& f : files) a.push_back(file_json(f));
  return a.dump(1);
}

std::vector<ManifestFile> parse_manifest_files(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    MS_FAIL("{}: not JSON: {}", where, e.what());
  }
  MS_CHECK(j.is_array(), "{}: not a JSON array of file records", where);
  std::vector<ManifestFile> out;
  for (size_t i = 0; i < j.size(); i++) out.push_back(file_from(JsonFields(j[i], where, fmt::format("[{}]", i))));
  return out;
}

std::string manifest_to_json(const Manifest& m) {
  json tensors = json::object();
  for (const auto& [name, t] : m.tensors) tensors[name] = {{"shape", t.shape}, {"split", t.split}};
  json files = json::array();
  for (const ManifestFile& f : m.files) files.push_back(file_json(f));
  const json j = {{"format", "megascale-checkpoint"},
                  {"format_version", m.format_version},
                  {"step", m.step},
                  {"data", {{"epoch", m.data.epoch}, {"index", m.data.index}}},
                  {"tokens", m.tokens},
                  {"loss", m.loss},
                  {"model_hash", m.model_hash},
                  {"model", m.model},
                  {"layout", {{"dp", m.dp}, {"tp", m.tp}, {"pp", m.pp}, {"virtual_stages", m.virtual_stages}}},
                  {"tensors", tensors},
                  {"files", files},
                  {"config", m.config_toml}};
  json out = j;
  if (!m.lineage.empty()) out["lineage"] = m.lineage;
  if (m.data_stream.present) {
    const ManifestDataStream& d = m.data_stream;
    out["data_stream"] = {{"files", d.files}, {"seed", d.seed}, {"seq_len", d.seq_len},
                          {"samples_per_step", d.samples_per_step}, {"shuffle", d.shuffle}};
  }
  return out.dump(1);
}

Manifest parse_manifest(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    MS_FAIL("{}: not JSON: {}", where, e.what());
  }
  MS_CHECK(j.is_object(), "{}: the manifest is not a JSON object", where);
  const JsonFields r(j, where);
  MS_CHECK(r.text("format") == "megascale-checkpoint", "{}: field 'format' is not 'megascale-checkpoint'", where);
  Manifest m;
  m.format_version = int_field(r, "format_version", 1, INT32_MAX);
  MS_CHECK(m.format_version <= kCheckpointFormatVersion,
           "{}: field 'format_version' = {}: written by a newer megascale (this one reads up to version {})", where,
           m.format_version, kCheckpointFormatVersion);
  m.step = int_field(r, "step", 0, 1000000000);  // train.steps' bound: step + 1 fits int
  const JsonFields data = r.object("data");
  m.data.epoch = data.unsigned_integer("epoch");
  m.data.index = data.unsigned_integer("index");
  m.tokens = r.unsigned_integer("tokens");
  m.loss = r.number("loss");
  m.model_hash = r.text("model_hash");
  const JsonFields model = r.object("model");
  for (const auto& [k, v] : r.at("model").items()) m.model[k] = model.text(k);
  m.config_toml = r.text("config");
  const JsonFields layout = r.object("layout");
  m.dp = int_field(layout, "dp", 1, 1 << 20);
  m.tp = int_field(layout, "tp", 1, 4096);
  m.pp = int_field(layout, "pp", 1, 4096);
  m.virtual_stages = int_field(layout, "virtual_stages", 1, 4096);
  const JsonFields tensors = r.object("tensors");
  for (const auto& [name, tj] : r.at("tensors").items()) {
    const JsonFields t = tensors.object(name);
    ManifestTensor mt;
    const json& shape = t.array("shape", true);
    for (const json& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() <= 0 || d.get<int64_t>() >= (int64_t{1} << 40))
        t.fail("shape", fmt::format("holds {}, not a positive dimension", d.dump()));
      mt.shape.push_back(d.get<int64_t>());
    }
    mt.split = t.text("split");
    if (mt.split != "replicated" && mt.split != "rows" && mt.split != "cols" && mt.split != "qkv_rows")
      t.fail("split", fmt::format("= '{}' is not replicated, rows, cols or qkv_rows", mt.split));
    m.tensors.emplace(name, std::move(mt));
  }
  const json& files = r.array("files", true);
  std::set<std::string> names;
  for (size_t i = 0; i < files.size(); i++) {
    ManifestFile f = file_from(JsonFields(files[i], where, fmt::format("files[{}]", i)));
    MS_CHECK(names.insert(f.name).second, "{}: file {} is listed twice", where, f.name);
    for (const ManifestEntry& e : f.entries) {
      auto it = m.tensors.find(e.tensor);
      MS_CHECK(it != m.tensors.end(), "{}: file {} entry '{}': tensor '{}' is not in 'tensors'", where, f.name, e.key,
               e.tensor);
    }
    m.files.push_back(std::move(f));
  }
  const std::string gap = coverage_problem(m);
  MS_CHECK(gap.empty(), "{}: {}", where, gap);
  if (j.contains("lineage")) {
    m.lineage = r.text("lineage");
    if (m.lineage.size() != 16 || m.lineage.find_first_not_of("0123456789abcdef") != std::string::npos)
      r.fail("lineage", fmt::format("= '{}' is not 16 hex digits", m.lineage));
  }
  if (j.contains("data_stream")) {
    const JsonFields d = r.object("data_stream");
    ManifestDataStream& s = m.data_stream;
    s.present = true;
    s.files = d.text("files");
    s.seed = d.integer("seed", INT32_MIN, INT32_MAX);
    s.seq_len = d.integer("seq_len", 1, INT32_MAX);
    s.samples_per_step = d.integer("samples_per_step", 1, INT32_MAX);
    s.shuffle = d.boolean("shuffle");
  }
  return m;
}

std::string manifest_lineage(const std::string& text) {
  try {
    const json j = json::parse(text);
    if (j.is_object() && j.contains("lineage") && j["lineage"].is_string()) return j["lineage"].get<std::string>();
  } catch (const std::exception&) {
  }
  return {};
}

std::string data_stream_difference(const ManifestDataStream& saved, const ManifestDataStream& run) {
  if (!saved.present || !run.present) return {};
  std::string out;
  auto add = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) out += fmt::format("{}{}: checkpoint {}, this run {}", out.empty() ? "" : "; ", what, a, b);
  };
  add("data.train files (names, sizes, checksums)", saved.files, run.files);
  add("train.seed", std::to_string(saved.seed), std::to_string(run.seed));
  add("train.seq_len", std::to_string(saved.seq_len), std::to_string(run.seq_len));
  add("samples per step", std::to_string(saved.samples_per_step), std::to_string(run.samples_per_step));
  add("data.shuffle", saved.shuffle ? "true" : "false", run.shuffle ? "true" : "false");
  return out;
}

std::string model_difference(const Manifest& m, const Config& cfg) {
  const std::map<std::string, std::string> mine = model_fields(cfg);
  // A field the saving version did not have held its default then (older checkpoints predate the
  // Llama family's fields: they are GPT-2 models, which those defaults describe).
  const std::map<std::string, std::string> defaults = model_fields(Config{});
  std::map<std::string, std::string> saved_only;  // the fields the saving run hashed
  std::string out;
  for (const auto& [k, v] : mine) {
    auto it = m.model.find(k);
    const bool absent = it == m.model.end();
    const std::string theirs = absent ? defaults.at(k) : it->second;
    if (!absent) saved_only[k] = v;
    if (theirs != v)
      out += fmt::format("{}model.{}: checkpoint {}{}, config {}", out.empty() ? "" : "; ", k, theirs,
                         absent ? " (absent: its default)" : "", v);
  }
  for (const auto& [k, v] : m.model)  // the saving run's neutral keys (older manifests listed every key)
    if (!mine.count(k) && !checkpoint_neutral(k)) out += fmt::format("{}model.{}: checkpoint {}, unknown here",
                                                                     out.empty() ? "" : "; ", k, v);
  const std::string want = saved_only.size() == mine.size() ? model_config_hash(cfg.model) : hash_of(saved_only);
  if (out.empty() && m.model_hash != want)
    out = fmt::format("model_hash: checkpoint {}, config {}", m.model_hash, want);
  return out;
}

std::string coverage_problem(const Manifest& m) {
  // (tensor, kind) -> part -> ranges, from every file.
  struct Key {
    std::string tensor;
    StateKind kind;
    auto operator<=>(const Key&) const = default;
  };
  std::map<Key, std::map<int, std::vector<std::pair<uint64_t, uint64_t>>>> ranges;
  std::map<Key, int> parts;
  for (const ManifestFile& f : m.files)
    for (const ManifestEntry& e : f.entries) {
      const Key k{e.tensor, e.kind};
      auto [it, fresh] = parts.emplace(k, e.parts);
      if (!fresh && it->second != e.parts)
        return fmt::format("tensor '{}' ({}) is cut into {} parts in one entry and {} in another", e.tensor,
                           state_kind_name(e.kind), it->second, e.parts);
      ranges[k][e.part].push_back({e.lo, e.hi});
    }
  for (const auto& [name, t] : m.tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    for (StateKind kind : kStateKinds) {
      const Key k{name, kind};
      auto pit = parts.find(k);
      if (pit == parts.end()) return fmt::format("tensor '{}' has no {} entries", name, state_kind_name(kind));
      const int P = pit->second;
      if (numel % static_cast<uint64_t>(P) != 0 || (t.split == "replicated" && P != 1))
        return fmt::format("tensor '{}' ({} elements, split {}) cannot be cut into {} parts", name, numel, t.split, P);
      const uint64_t per = numel / static_cast<uint64_t>(P);
      for (int p = 0; p < P; p++) {
        auto& rs = ranges[k][p];
        std::sort(rs.begin(), rs.end());
        uint64_t at = 0;
        for (const auto& [lo, hi] : rs) {
          if (lo != at)
            return fmt::format("tensor '{}' ({}) part {}: elements [{}, {}) {}", name, state_kind_name(kind), p,
                               std::min(at, lo), std::max(at, lo), lo > at ? "are in no file" : "are in two files");
          at = hi;
        }
        if (at != per)
          return fmt::format("tensor '{}' ({}) part {}: covers {} of {} elements", name, state_kind_name(kind), p, at,
                             per);
      }
    }
  }
  for (const auto& [k, p] : parts)
    if (!m.tensors.count(k.tensor)) return fmt::format("entries for unknown tensor '{}'", k.tensor);
  return {};
}

std::string tensor_difference(const Manifest& m, const ModelConfig& model) {
  std::map<std::string, std::vector<int64_t>> want;
  for (const ParamSpec& s : build_param_layout(model).specs) want[s.name] = {s.full_shape.begin(), s.full_shape.end()};
  auto shape_text = [](const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); };
  std::string out;
  auto add = [&](const std::string& d) { out += (out.empty() ? "" : "; ") + d; };
  for (const auto& [name, shape] : want) {
    auto it = m.tensors.find(name);
    if (it == m.tensors.end()) add(fmt::format("tensor '{}' {} of the model is not in the checkpoint", name, shape_text(shape)));
    else if (it->second.shape != shape)
      add(fmt::format("tensor '{}': checkpoint {}, model {}", name, shape_text(it->second.shape), shape_text(shape)));
  }
  for (const auto& [name, t] : m.tensors) {
    if (want.count(name)) continue;
    const std::vector<int64_t>& wte = want[token_embedding_name(model)];
    if (name == kHeadCopyName) {
      if (t.shape != wte)
        add(fmt::format("tensor '{}' (the head's copy of the token embedding): checkpoint {}, model {}", name,
                        shape_text(t.shape), shape_text(wte)));
    } else {
      add(fmt::format("tensor '{}' {} of the checkpoint is not part of the model", name, shape_text(t.shape)));
    }
  }
  return out;
}

}  // namespace ms
