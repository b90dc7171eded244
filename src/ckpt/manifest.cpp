// manifest.cpp: see manifest.h.
#include "ckpt/manifest.h"

#include <algorithm>  // std::sort
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join
#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "base/check.h"          // MS_CHECK, MS_FAIL
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

std::map<std::string, std::string> model_fields(const Config& c) {
  std::map<std::string, std::string> out;
  for (const FieldInfo& f : list_fields(c))
    if (f.key.starts_with("model.")) out[f.key.substr(6)] = f.value;
  return out;
}

std::string model_config_hash(const ModelConfig& m) {
  Config c;
  c.model = m;
  std::string text;
  for (const auto& [k, v] : model_fields(c)) text += k + "=" + v + "\n";
  return fmt::format("{:016x}", XXH64(text.data(), text.size(), 0));
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

// Typed field access: every error names the source and the field's path.
struct Reader {
  const std::string& where;
  const json& get(const json& o, const std::string& path, const char* key) const {
    MS_CHECK(o.is_object(), "{}: '{}' is not an object", where, path);
    MS_CHECK(o.contains(key), "{}: field '{}{}{}' is missing", where, path, path.empty() ? "" : ".", key);
    return o.at(key);
  }
  std::string name(const std::string& path, const char* key) const {
    return path.empty() ? std::string(key) : path + "." + key;
  }
  int64_t integer(const json& o, const std::string& path, const char* key, int64_t lo = 0,
                  int64_t hi = INT64_MAX) const {
    const json& v = get(o, path, key);
    MS_CHECK(v.is_number_integer(), "{}: field '{}' is not an integer: {}", where, name(path, key), v.dump());
    const int64_t x = v.get<int64_t>();
    MS_CHECK(x >= lo && x <= hi, "{}: field '{}' = {} is outside [{}, {}]", where, name(path, key), x, lo, hi);
    return x;
  }
  uint64_t unsigned_integer(const json& o, const std::string& path, const char* key) const {
    const json& v = get(o, path, key);
    MS_CHECK(v.is_number_unsigned(), "{}: field '{}' is not a non-negative integer: {}", where, name(path, key),
             v.dump());
    return v.get<uint64_t>();
  }
  std::string text(const json& o, const std::string& path, const char* key) const {
    const json& v = get(o, path, key);
    MS_CHECK(v.is_string(), "{}: field '{}' is not a string: {}", where, name(path, key), v.dump());
    return v.get<std::string>();
  }
};

StateKind kind_from(const Reader& r, const std::string& s, const std::string& path) {
  for (StateKind k : kStateKinds)
    if (s == state_kind_name(k)) return k;
  MS_FAIL("{}: field '{}.kind' = '{}' is not param, exp_avg or exp_avg_sq", r.where, path, s);
}

ManifestFile file_from(const Reader& r, const json& o, const std::string& path) {
  ManifestFile f;
  f.name = r.text(o, path, "name");
  MS_CHECK(!f.name.empty() && f.name.find('/') == std::string::npos && f.name[0] != '.',
           "{}: field '{}.name' = '{}' is not a plain file name", r.where, path, f.name);
  f.rank = static_cast<int>(r.integer(o, path, "rank", 0, INT32_MAX));
  f.dp = static_cast<int>(r.integer(o, path, "dp", 0, INT32_MAX));
  f.tp = static_cast<int>(r.integer(o, path, "tp", 0, INT32_MAX));
  f.pp = static_cast<int>(r.integer(o, path, "pp", 0, INT32_MAX));
  f.bytes = r.unsigned_integer(o, path, "bytes");
  f.xxh64 = r.text(o, path, "xxh64");
  MS_CHECK(f.xxh64.size() == 16 && f.xxh64.find_first_not_of("0123456789abcdef") == std::string::npos,
           "{}: field '{}.xxh64' = '{}' is not 16 hex digits", r.where, path, f.xxh64);
  const json& entries = r.get(o, path, "entries");
  MS_CHECK(entries.is_array(), "{}: field '{}.entries' is not an array", r.where, path);
  std::set<std::string> keys;
  for (size_t i = 0; i < entries.size(); i++) {
    const std::string p = fmt::format("{}.entries[{}]", path, i);
    const json& e = entries[i];
    ManifestEntry m;
    m.key = r.text(e, p, "key");
    MS_CHECK(keys.insert(m.key).second, "{}: '{}': key '{}' appears twice in file {}", r.where, p, m.key, f.name);
    m.tensor = r.text(e, p, "tensor");
    m.kind = kind_from(r, r.text(e, p, "kind"), p);
    m.parts = static_cast<int>(r.integer(e, p, "parts", 1, 4096));
    m.part = static_cast<int>(r.integer(e, p, "part", 0, m.parts - 1));
    m.lo = r.unsigned_integer(e, p, "lo");
    m.hi = r.unsigned_integer(e, p, "hi");
    MS_CHECK(m.lo < m.hi, "{}: '{}': empty or reversed range [{}, {})", r.where, p, m.lo, m.hi);
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
  for (size_t i = 0; i < j.size(); i++) out.push_back(file_from(Reader{where}, j[i], fmt::format("[{}]", i)));
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
  const Reader r{where};
  MS_CHECK(j.is_object(), "{}: the manifest is not a JSON object", where);
  MS_CHECK(r.text(j, "", "format") == "megascale-checkpoint", "{}: field 'format' is not 'megascale-checkpoint'", where);
  Manifest m;
  m.format_version = static_cast<int>(r.integer(j, "", "format_version", 1, INT32_MAX));
  MS_CHECK(m.format_version <= kCheckpointFormatVersion,
           "{}: field 'format_version' = {}: written by a newer megascale (this one reads up to version {})", where,
           m.format_version, kCheckpointFormatVersion);
  m.step = static_cast<int>(r.integer(j, "", "step", 0, 1000000000));  // train.steps' bound: step + 1 fits int
  const json& data = r.get(j, "", "data");
  m.data.epoch = r.unsigned_integer(data, "data", "epoch");
  m.data.index = r.unsigned_integer(data, "data", "index");
  m.tokens = r.unsigned_integer(j, "", "tokens");
  const json& loss = r.get(j, "", "loss");
  MS_CHECK(loss.is_number(), "{}: field 'loss' is not a number: {}", where, loss.dump());
  m.loss = loss.get<double>();
  m.model_hash = r.text(j, "", "model_hash");
  const json& model = r.get(j, "", "model");
  MS_CHECK(model.is_object(), "{}: field 'model' is not an object", where);
  for (const auto& [k, v] : model.items()) {
    MS_CHECK(v.is_string(), "{}: field 'model.{}' is not a string", where, k);
    m.model[k] = v.get<std::string>();
  }
  m.config_toml = r.text(j, "", "config");
  const json& layout = r.get(j, "", "layout");
  m.dp = static_cast<int>(r.integer(layout, "layout", "dp", 1, 1 << 20));
  m.tp = static_cast<int>(r.integer(layout, "layout", "tp", 1, 4096));
  m.pp = static_cast<int>(r.integer(layout, "layout", "pp", 1, 4096));
  m.virtual_stages = static_cast<int>(r.integer(layout, "layout", "virtual_stages", 1, 4096));
  const json& tensors = r.get(j, "", "tensors");
  MS_CHECK(tensors.is_object(), "{}: field 'tensors' is not an object", where);
  for (const auto& [name, t] : tensors.items()) {
    const std::string p = "tensors." + name;
    ManifestTensor mt;
    const json& shape = r.get(t, p, "shape");
    MS_CHECK(shape.is_array() && !shape.empty(), "{}: field '{}.shape' is not a non-empty array", where, p);
    for (const json& d : shape) {
      MS_CHECK(d.is_number_integer() && d.get<int64_t>() > 0 && d.get<int64_t>() < (int64_t{1} << 40),
               "{}: field '{}.shape' holds {}, not a positive dimension", where, p, d.dump());
      mt.shape.push_back(d.get<int64_t>());
    }
    mt.split = r.text(t, p, "split");
    MS_CHECK(mt.split == "replicated" || mt.split == "rows" || mt.split == "cols" || mt.split == "qkv_rows",
             "{}: field '{}.split' = '{}' is not replicated, rows, cols or qkv_rows", where, p, mt.split);
    m.tensors.emplace(name, std::move(mt));
  }
  const json& files = r.get(j, "", "files");
  MS_CHECK(files.is_array() && !files.empty(), "{}: field 'files' is not a non-empty array", where);
  std::set<std::string> names;
  for (size_t i = 0; i < files.size(); i++) {
    ManifestFile f = file_from(r, files[i], fmt::format("files[{}]", i));
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
    m.lineage = r.text(j, "", "lineage");
    MS_CHECK(m.lineage.size() == 16 && m.lineage.find_first_not_of("0123456789abcdef") == std::string::npos,
             "{}: field 'lineage' = '{}' is not 16 hex digits", where, m.lineage);
  }
  if (j.contains("data_stream")) {
    const json& d = r.get(j, "", "data_stream");
    ManifestDataStream& s = m.data_stream;
    s.present = true;
    s.files = r.text(d, "data_stream", "files");
    s.seed = r.integer(d, "data_stream", "seed", INT32_MIN, INT32_MAX);
    s.seq_len = r.integer(d, "data_stream", "seq_len", 1, INT32_MAX);
    s.samples_per_step = r.integer(d, "data_stream", "samples_per_step", 1, INT32_MAX);
    const json& sh = r.get(d, "data_stream", "shuffle");
    MS_CHECK(sh.is_boolean(), "{}: field 'data_stream.shuffle' is not true or false: {}", where, sh.dump());
    s.shuffle = sh.get<bool>();
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
  std::string out;
  for (const auto& [k, v] : mine) {
    auto it = m.model.find(k);
    const std::string theirs = it == m.model.end() ? "(absent)" : it->second;
    if (theirs != v) out += fmt::format("{}model.{}: checkpoint {}, config {}", out.empty() ? "" : "; ", k, theirs, v);
  }
  if (out.empty() && m.model_hash != model_config_hash(cfg.model))
    out = fmt::format("model_hash: checkpoint {}, config {}", m.model_hash, model_config_hash(cfg.model));
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
    const std::vector<int64_t>& wte = want["transformer.wte.weight"];
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
