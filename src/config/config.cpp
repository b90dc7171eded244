// config.cpp: loading, overriding and dumping the config tree, and fitting its layout to the world
// (see config.h; the value checks are config_validate.cpp).
#include "config/config.h"

#include <cstdint>
#include <optional>
#include <type_traits>
#include <sstream>  // std::ostringstream

#include <nlohmann/json.hpp>  // nlohmann::json
#include <toml++/toml.h>      // toml::parse_file, toml::table

#include "base/check.h"         // MS_CHECK, MS_FAIL
#include "base/cpu_features.h"  // cpu_has_amx_bf16, cpu_has_avx512_bf16 (train.precision = auto)

namespace ms {
namespace {

constexpr const char* kPresetKey = "model.preset";  // applied before the other keys of its source

// Calls f(key, field&, doc) for every field, in declaration order.
template <class C, class F>
void visit(C& c, F&& f) {
#define MS_V_MODEL(type, name, def, doc) f("model." #name, c.model.name, doc);
#define MS_V_OPTIM(type, name, def, doc) f("optim." #name, c.optim.name, doc);
#define MS_V_DATA(type, name, def, doc) f("data." #name, c.data.name, doc);
#define MS_V_TRAIN(type, name, def, doc) f("train." #name, c.train.name, doc);
#define MS_V_PARALLEL(type, name, def, doc) f("parallel." #name, c.parallel.name, doc);
#define MS_V_CHECKPOINT(type, name, def, doc) f("checkpoint." #name, c.checkpoint.name, doc);
#define MS_V_OBS(type, name, def, doc) f("obs." #name, c.obs.name, doc);
  MS_MODEL_FIELDS(MS_V_MODEL)
  MS_OPTIM_FIELDS(MS_V_OPTIM)
  MS_DATA_FIELDS(MS_V_DATA)
  MS_TRAIN_FIELDS(MS_V_TRAIN)
  MS_PARALLEL_FIELDS(MS_V_PARALLEL)
  MS_CHECKPOINT_FIELDS(MS_V_CHECKPOINT)
  MS_OBS_FIELDS(MS_V_OBS)
#undef MS_V_OBS
#undef MS_V_CHECKPOINT
#undef MS_V_PARALLEL
#undef MS_V_MODEL
#undef MS_V_OPTIM
#undef MS_V_DATA
#undef MS_V_TRAIN
}

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, int>) return "int";
  else if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else return "choice";  // a config enum (config_enum.h)
}

std::string to_text(int v) { return std::to_string(v); }
std::string to_text(float v) { return fmt::format("{}", v); }
std::string to_text(bool v) { return v ? "true" : "false"; }
std::string to_text(const std::string& v) { return v; }
template <class E, class = std::enable_if_t<is_config_enum<E>::value>>
std::string to_text(E v) { return config_name(v); }

void parse_text(const std::string& s, int& out, const std::string& where, const std::string& key) {
  size_t pos = 0;
  long long v = 0;
  try { v = std::stoll(s, &pos); } catch (...) { pos = 0; }
  MS_CHECK(pos == s.size() && !s.empty() && v >= INT32_MIN && v <= INT32_MAX,
           "{}: {}: expected an integer, got '{}'", where, key, s);
  out = static_cast<int>(v);
}
void parse_text(const std::string& s, float& out, const std::string& where, const std::string& key) {
  size_t pos = 0;
  float v = 0;
  try { v = std::stof(s, &pos); } catch (...) { pos = 0; }
  // "nan"/"inf" parse as floats; validate() rejects non-finite values with the key named.
  MS_CHECK(pos == s.size() && !s.empty(), "{}: {}: expected a number, got '{}'", where, key, s);
  out = v;
}
void parse_text(const std::string& s, bool& out, const std::string& where, const std::string& key) {
  if (s == "true" || s == "1" || s == "on") { out = true; return; }
  if (s == "false" || s == "0" || s == "off") { out = false; return; }
  MS_FAIL("{}: {}: expected true or false, got '{}'", where, key, s);
}
void parse_text(const std::string& s, std::string& out, const std::string&, const std::string&) { out = s; }
// train.precision also takes 'auto': bf16 where the CPU has bf16 units (AMX-BF16 or AVX512-BF16),
// else fp32. It is resolved here, at load, so the resolved config and a checkpoint name the value used.
void parse_text(const std::string& s, DType& out, const std::string& where, const std::string& key) {
  if (s == "auto") {
    out = cpu_has_amx_bf16() || cpu_has_avx512_bf16() ? DType::kBF16 : DType::kF32;
    return;
  }
  const std::optional<DType> v = parse_config_enum<DType>(s);
  MS_CHECK(v.has_value(), "{}: {}='{}' must be {} or 'auto'", where, key, s, config_choices<DType>());
  out = *v;
}
template <class E, class = std::enable_if_t<is_config_enum<E>::value>>
void parse_text(const std::string& s, E& out, const std::string& where, const std::string& key) {
  const std::optional<E> v = parse_config_enum<E>(s);
  MS_CHECK(v.has_value(), "{}: {}='{}' must be {}", where, key, s, config_choices<E>());
  out = *v;
}

// TOML node -> field, with a type check naming the key.
void from_node(const toml::node& n, int& out, const std::string& where, const std::string& key) {
  auto v = n.value<int64_t>();
  MS_CHECK(n.is_integer() && v, "{}: {}: expected an integer", where, key);
  MS_CHECK(*v >= INT32_MIN && *v <= INT32_MAX, "{}: {}: {} is out of range", where, key, *v);
  out = static_cast<int>(*v);
}
void from_node(const toml::node& n, float& out, const std::string& where, const std::string& key) {
  MS_CHECK(n.is_number(), "{}: {}: expected a number", where, key);
  out = static_cast<float>(*n.value<double>());
}
void from_node(const toml::node& n, bool& out, const std::string& where, const std::string& key) {
  MS_CHECK(n.is_boolean(), "{}: {}: expected true or false", where, key);
  out = *n.value<bool>();
}
void from_node(const toml::node& n, std::string& out, const std::string& where, const std::string& key) {
  MS_CHECK(n.is_string(), "{}: {}: expected a string", where, key);
  out = *n.value<std::string>();
}
template <class E, class = std::enable_if_t<is_config_enum<E>::value>>
void from_node(const toml::node& n, E& out, const std::string& where, const std::string& key) {
  MS_CHECK(n.is_string(), "{}: {}: expected a string, one of {}", where, key, config_choices<E>());
  parse_text(*n.value<std::string>(), out, where, key);
}

}  // namespace

std::vector<FieldInfo> list_fields(const Config& c) {
  std::vector<FieldInfo> out;
  visit(c, [&](const char* key, const auto& v, const char* doc) {
    using T = std::decay_t<decltype(v)>;
    FieldInfo info{key, type_name<T>(), to_text(v), doc, {}};
    if constexpr (is_config_enum<T>::value)
      for (const auto& [e, name] : ConfigEnum<T>::values()) info.choices.push_back(name);
    out.push_back(std::move(info));
  });
  return out;
}

void set_field(Config& c, const std::string& key, const std::string& value, const std::string& where) {
  bool found = false;
  visit(c, [&](const char* k, auto& v, const char*) {
    if (key == k) { parse_text(value, v, where, key); found = true; }
  });
  MS_CHECK(found, "{}: unknown config key '{}' (see `megascale train --help`)", where, key);
}

void apply_overrides(Config& c, const std::vector<std::pair<std::string, std::string>>& kv, const std::string& where) {
  for (const auto& [k, v] : kv)
    if (k == kPresetKey) {
      set_field(c, k, v, where);
      c.model.apply_preset();
    }
  for (const auto& [k, v] : kv)
    if (k != kPresetKey) set_field(c, k, v, where);
}

namespace {
// Applies a parsed TOML table over c; `path` names the source in errors. model.preset first (its
// family defaults), then every key (the preset again: a no-op), so explicit keys override it.
void apply_toml(Config& c, const toml::table& tbl, const std::string& path) {
  if (const toml::node* preset = tbl.at_path(kPresetKey).node()) {
    from_node(*preset, c.model.preset, path, kPresetKey);
    c.model.apply_preset();
  }
  // Every key in the file must be a known field.
  for (auto&& [section, node] : tbl) {
    const toml::table* sec = node.as_table();
    MS_CHECK(sec, "{}: top-level key '{}' is not a section; expected [model], [optim], [data], [train], [parallel], [checkpoint] or [obs]",
             path, section.str());
    for (auto&& [name, value] : *sec) {
      std::string key = std::string(section.str()) + "." + std::string(name.str());
      bool found = false;
      if (key == kPresetKey) continue;  // applied above
      visit(c, [&](const char* k, auto& v, const char*) {
        if (key == k) { from_node(value, v, path, key); found = true; }
      });
      MS_CHECK(found, "{}: unknown config key '{}' (see `megascale train --help`)", path, key);
    }
  }
}

toml::table parse_toml(const std::string& path, const std::string* text) {
  try {
    return text ? toml::parse(*text, path) : toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    MS_FAIL("{}:{}:{}: TOML parse error: {}", path, src.begin.line, src.begin.column, e.description());
  }
}
}  // namespace

void load_toml(Config& c, const std::string& path) { apply_toml(c, parse_toml(path, nullptr), path); }

void load_toml_text(Config& c, const std::string& text, const std::string& where) {
  apply_toml(c, parse_toml(where, &text), where);
}

std::string to_toml(const Config& c) {
  toml::table root;
  visit(c, [&](const char* key, const auto& v, const char*) {
    std::string k = key;
    auto dot = k.find('.');
    std::string sec = k.substr(0, dot), name = k.substr(dot + 1);
    if (!root.contains(sec)) root.insert(sec, toml::table{});
    using T = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<T, float>) root[sec].as_table()->insert(name, static_cast<double>(v));
    else if constexpr (std::is_same_v<T, int>) root[sec].as_table()->insert(name, static_cast<int64_t>(v));
    else if constexpr (is_config_enum<T>::value) root[sec].as_table()->insert(name, std::string(config_name(v)));
    else root[sec].as_table()->insert(name, v);
  });
  std::ostringstream os;
  os << "# megascale resolved config\n" << root << "\n";
  return os.str();
}

std::string to_json(const Config& c) {
  nlohmann::json j;
  visit(c, [&](const char* key, const auto& v, const char*) {
    std::string k = key;
    auto dot = k.find('.');
    using T = std::decay_t<decltype(v)>;
    if constexpr (is_config_enum<T>::value) j[k.substr(0, dot)][k.substr(dot + 1)] = config_name(v);
    else j[k.substr(0, dot)][k.substr(dot + 1)] = v;
  });
  return j.dump(2);
}

void Config::resolve_layout(int world_size) {
  validate();  // the arithmetic below relies on positive, bounded values
  auto& p = parallel;
  MS_CHECK(world_size >= 1, "layout: world size {} must be >= 1", world_size);
  const int tp_pp = p.tp * p.pp;
  if (p.dp == 0) {
    MS_CHECK(world_size % tp_pp == 0, "layout: world size {} is not divisible by parallel.tp={} x parallel.pp={}",
             world_size, p.tp, p.pp);
    p.dp = world_size / tp_pp;
  }
  MS_CHECK(p.tp * p.dp * p.pp == world_size,
           "layout: parallel.tp={} x parallel.dp={} x parallel.pp={} = {} does not match the world size {}",
           p.tp, p.dp, p.pp, p.tp * p.dp * p.pp, world_size);
  auto& t = train;
  if (t.global_batch > 0) {
    MS_CHECK(t.global_batch % (p.dp * t.batch_size) == 0,
             "layout: train.global_batch={} is not divisible by parallel.dp={} x train.batch_size={}",
             t.global_batch, p.dp, t.batch_size);
    t.grad_accum = t.global_batch / (p.dp * t.batch_size);
    MS_CHECK(p.schedule != PipelineScheduleKind::kInterleaved || t.grad_accum % p.pp == 0,
             "layout: train.global_batch={} gives {} micro-batches per data-parallel rank, not a multiple of "
             "parallel.pp={}, which the interleaved schedule needs", t.global_batch, t.grad_accum, p.pp);
  } else {
    t.global_batch = t.batch_size * t.grad_accum * p.dp;
  }
  validate();  // the rules that involve dp, now that it is known (e.g. train.device = cuda needs dp = 1)
}

}  // namespace ms
