// config.cpp: loading, overriding, dumping and validating the config tree (see config.h).
#include "config/config.h"

#include <algorithm>  // std::max
#include <cmath>    // std::isfinite
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

namespace {
// Applies a parsed TOML table over c; `path` names the source in errors.
void apply_toml(Config& c, const toml::table& tbl, const std::string& path) {
  // Every key in the file must be a known field.
  for (auto&& [section, node] : tbl) {
    const toml::table* sec = node.as_table();
    MS_CHECK(sec, "{}: top-level key '{}' is not a section; expected [model], [optim], [data], [train], [parallel], [checkpoint] or [obs]",
             path, section.str());
    for (auto&& [name, value] : *sec) {
      std::string key = std::string(section.str()) + "." + std::string(name.str());
      bool found = false;
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

void Config::validate() const {
  const auto& m = model;
  MS_CHECK(m.vocab_size > 0 && m.vocab_size <= 65536, "config: model.vocab_size={} must be in 1..65536 (tokens are stored as uint16)", m.vocab_size);
  // Upper bounds keep every size product (Vp, 3C, 4C, 4C x C, Vp x C, max_seq_len x C) inside int.
  MS_CHECK(m.pad_vocab_to > 0 && m.pad_vocab_to <= 65536, "config: model.pad_vocab_to={} must be in 1..65536",
           m.pad_vocab_to);
  MS_CHECK(m.n_layer > 0 && m.n_layer <= 65536, "config: model.n_layer={} must be in 1..65536", m.n_layer);
  MS_CHECK(m.n_embd > 0 && m.n_embd <= 16384, "config: model.n_embd={} must be in 1..16384 (the MLP's 4 x n_embd^2 "
           "weights must stay within 32-bit sizes)", m.n_embd);
  MS_CHECK(m.n_head > 0 && m.n_embd % m.n_head == 0,
           "config: model.n_head={} does not divide model.n_embd={}", m.n_head, m.n_embd);
  MS_CHECK(m.max_seq_len > 0 && m.max_seq_len <= (1 << 20), "config: model.max_seq_len={} must be in 1..1048576",
           m.max_seq_len);
  MS_CHECK(static_cast<int64_t>(m.padded_vocab()) * m.n_embd <= INT32_MAX &&
               static_cast<int64_t>(m.max_seq_len) * m.n_embd <= INT32_MAX,
           "config: the embeddings are too large: the padded vocabulary {} or model.max_seq_len={} times "
           "model.n_embd={} exceeds 2^31-1 elements", m.padded_vocab(), m.max_seq_len, m.n_embd);
  MS_CHECK(m.attention != AttentionKind::kSliding || m.window > 0,
           "config: model.window={} must be > 0 for sliding attention", m.window);
  MS_CHECK(m.full_every >= 0, "config: model.full_every={} must be >= 0", m.full_every);
  MS_CHECK(std::isfinite(m.init_std) && m.init_std > 0, "config: model.init_std={} must be finite and > 0", m.init_std);

  const auto& o = optim;
  MS_CHECK(std::isfinite(o.lr) && o.lr > 0, "config: optim.lr={} must be finite and > 0", o.lr);
  MS_CHECK(std::isfinite(o.min_lr) && o.min_lr >= 0 && o.min_lr <= o.lr,
           "config: optim.min_lr={} must be finite and in [0, optim.lr={}]", o.min_lr, o.lr);
  MS_CHECK(o.warmup_steps >= 0, "config: optim.warmup_steps={} must be >= 0", o.warmup_steps);
  MS_CHECK(o.decay_steps >= 0, "config: optim.decay_steps={} must be >= 0", o.decay_steps);
  MS_CHECK(std::isfinite(o.beta1) && o.beta1 >= 0 && o.beta1 < 1, "config: optim.beta1={} must be in [0,1)", o.beta1);
  MS_CHECK(std::isfinite(o.beta2) && o.beta2 >= 0 && o.beta2 < 1, "config: optim.beta2={} must be in [0,1)", o.beta2);
  MS_CHECK(std::isfinite(o.eps) && o.eps > 0, "config: optim.eps={} must be finite and > 0", o.eps);
  MS_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "config: optim.weight_decay={} must be finite and >= 0", o.weight_decay);
  MS_CHECK(std::isfinite(o.max_trust) && o.max_trust >= 0, "config: optim.max_trust={} must be finite and >= 0", o.max_trust);
  MS_CHECK(std::isfinite(o.grad_clip) && o.grad_clip >= 0, "config: optim.grad_clip={} must be finite and >= 0", o.grad_clip);

  MS_CHECK(!data.train.empty(), "config: data.train is missing (path, directory or glob of training shards)");

  const auto& t = train;
  MS_CHECK(t.steps > 0 && t.steps <= 1000000000, "config: train.steps={} must be in 1..1000000000", t.steps);
  MS_CHECK(t.batch_size > 0, "config: train.batch_size={} must be > 0", t.batch_size);
  MS_CHECK(t.seq_len > 0 && t.seq_len <= m.max_seq_len,
           "config: train.seq_len={} must be in 1..model.max_seq_len={}", t.seq_len, m.max_seq_len);
  MS_CHECK(t.grad_accum > 0, "config: train.grad_accum={} must be > 0", t.grad_accum);
  MS_CHECK(t.eval_every >= 0, "config: train.eval_every={} must be >= 0", t.eval_every);
  MS_CHECK(t.eval_batches > 0, "config: train.eval_batches={} must be > 0", t.eval_batches);
  MS_CHECK(t.sample_tokens >= 0, "config: train.sample_tokens={} must be >= 0", t.sample_tokens);
  MS_CHECK(!t.out_dir.empty(), "config: train.out_dir must not be empty");
  MS_CHECK(t.threads >= 0, "config: train.threads={} must be >= 0", t.threads);
  MS_CHECK(t.precision == DType::kF32 || t.precision == DType::kBF16,
           "config: train.precision='{}' must be {}", dtype_name(t.precision), config_choices<DType>());
  MS_CHECK(t.global_batch >= 0, "config: train.global_batch={} must be >= 0", t.global_batch);
  MS_CHECK(!t.resume.empty(), "config: train.resume must be 'auto', 'never' or a checkpoint folder");
  MS_CHECK(t.exit_after >= 0, "config: train.exit_after={} must be >= 0", t.exit_after);
  const auto& k = checkpoint;
  MS_CHECK(k.every >= 0, "config: checkpoint.every={} must be >= 0 (0 = no periodic saves)", k.every);
  MS_CHECK(k.keep_last >= 1, "config: checkpoint.keep_last={} must be >= 1 (the newest checkpoint is always kept)",
           k.keep_last);
  MS_CHECK(k.keep_every >= 0, "config: checkpoint.keep_every={} must be >= 0", k.keep_every);
  MS_CHECK(std::isfinite(k.timeout_s) && k.timeout_s > 0, "config: checkpoint.timeout_s={} must be > 0", k.timeout_s);
  const auto& ob = obs;
  MS_CHECK(ob.flush_ms >= 10 && ob.flush_ms <= 600000, "config: obs.flush_ms={} must be in 10..600000", ob.flush_ms);
  MS_CHECK(ob.summary_every >= 0, "config: obs.summary_every={} must be >= 0 (0 = never)", ob.summary_every);
  MS_CHECK(std::isfinite(ob.straggler_margin) && ob.straggler_margin > 0 && ob.straggler_margin < 10,
           "config: obs.straggler_margin={} must be in (0, 10) (a fraction: 0.05 = 5% slower than the peers' median)",
           ob.straggler_margin);
  MS_CHECK(ob.straggler_window >= 2, "config: obs.straggler_window={} must be >= 2 steps", ob.straggler_window);
  MS_CHECK(ob.realign_every >= 0, "config: obs.realign_every={} must be >= 0 (0 = only at start-up)", ob.realign_every);
  MS_CHECK(std::isfinite(ob.watchdog_grace_s) && ob.watchdog_grace_s >= 0 && ob.watchdog_grace_s <= 3600,
           "config: obs.watchdog_grace_s={} must be in 0..3600", ob.watchdog_grace_s);

  const auto& p = parallel;
  MS_CHECK(p.dp >= 0, "config: parallel.dp={} must be >= 0 (0 = all ranks)", p.dp);
  MS_CHECK(p.tp >= 1 && p.tp <= 4096, "config: parallel.tp={} must be in 1..4096", p.tp);
  if (p.tp > 1) {  // the tensor-parallel split must cut every sharded dimension evenly
    MS_CHECK(m.n_head % p.tp == 0, "config: parallel.tp={} does not divide model.n_head={} (heads are split over the "
             "tensor-parallel ranks)", p.tp, m.n_head);
    MS_CHECK((4 * m.n_embd) % p.tp == 0, "config: parallel.tp={} does not divide the MLP width 4*model.n_embd={}",
             p.tp, 4 * m.n_embd);
    MS_CHECK(m.padded_vocab() % p.tp == 0, "config: parallel.tp={} does not divide the padded vocabulary {} "
             "(model.vocab_size={} rounded up to model.pad_vocab_to={}); choose pad_vocab_to as a multiple of tp",
             p.tp, m.padded_vocab(), m.vocab_size, m.pad_vocab_to);
    MS_CHECK(!p.sequence_parallel || t.seq_len % p.tp == 0, "config: parallel.tp={} does not divide train.seq_len={}, "
             "which sequence parallelism splits (or set parallel.sequence_parallel=false)", p.tp, t.seq_len);
  }
  MS_CHECK(p.tp_chunks >= 1, "config: parallel.tp_chunks={} must be >= 1", p.tp_chunks);
  if (p.tp > 1 && p.sequence_parallel)
    MS_CHECK(static_cast<int64_t>(p.tp_chunks) <= static_cast<int64_t>(t.batch_size) * t.seq_len / p.tp,
             "config: parallel.tp_chunks={} exceeds the {} rows each tensor-parallel rank holds (train.batch_size x "
             "train.seq_len / parallel.tp)", p.tp_chunks, static_cast<int64_t>(t.batch_size) * t.seq_len / p.tp);
  MS_CHECK(p.pp >= 1 && p.pp <= 4096, "config: parallel.pp={} must be in 1..4096", p.pp);
  MS_CHECK(p.virtual_stages >= 1, "config: parallel.virtual_stages={} must be >= 1", p.virtual_stages);
  MS_CHECK(p.virtual_stages == 1 || p.schedule == PipelineScheduleKind::kInterleaved,
           "config: parallel.virtual_stages={} needs parallel.schedule='interleaved' (1f1b runs one chunk per stage)",
           p.virtual_stages);
  MS_CHECK(p.virtual_stages == 1 || p.pp > 1, "config: parallel.virtual_stages={} needs parallel.pp > 1",
           p.virtual_stages);
  MS_CHECK(m.n_layer % (p.pp * p.virtual_stages) == 0,
           "config: model.n_layer={} is not divisible by parallel.pp={} x parallel.virtual_stages={} (the pipeline's "
           "model chunks hold equal numbers of layers)", m.n_layer, p.pp, p.virtual_stages);
  if (p.schedule == PipelineScheduleKind::kInterleaved && t.global_batch == 0)
    MS_CHECK(t.grad_accum % p.pp == 0, "config: train.grad_accum={} (the micro-batches of a step) is not a multiple "
             "of parallel.pp={}, which the interleaved schedule needs", t.grad_accum, p.pp);
  MS_CHECK(std::isfinite(data.loader_timeout_s) && data.loader_timeout_s > 0 && data.loader_timeout_s <= 7 * 24 * 3600.0,
           "config: data.loader_timeout_s={} must be in (0, 604800] seconds", data.loader_timeout_s);
  MS_CHECK(std::isfinite(p.bucket_mb) && p.bucket_mb > 0, "config: parallel.bucket_mb={} must be > 0", p.bucket_mb);
  // Milliseconds must fit the deadline arithmetic (int64 ns): at most a week.
  MS_CHECK(std::isfinite(p.timeout_s) && p.timeout_s > 0 && p.timeout_s <= 7 * 24 * 3600.0,
           "config: parallel.timeout_s={} must be in (0, 604800] seconds", p.timeout_s);
  MS_CHECK(p.bucket_mb <= 65536.0f, "config: parallel.bucket_mb={} must be <= 65536", p.bucket_mb);
  // Tokens per micro-batch and sequences per step stay well inside int.
  MS_CHECK(static_cast<int64_t>(t.batch_size) * t.seq_len <= (int64_t{1} << 30),
           "config: train.batch_size={} x train.seq_len={} tokens per micro-batch is too large", t.batch_size, t.seq_len);
  MS_CHECK(static_cast<int64_t>(t.batch_size) * t.grad_accum * std::max(p.dp, 1) <= INT32_MAX,
           "config: train.batch_size={} x train.grad_accum={} x parallel.dp={} sequences per step is too large",
           t.batch_size, t.grad_accum, p.dp);
  MS_CHECK(static_cast<int64_t>(p.tp) * std::max(p.dp, 1) * p.pp <= 1 << 20,
           "config: parallel.tp={} x parallel.dp={} x parallel.pp={} ranks is too large", p.tp, p.dp, p.pp);
  if (p.dp > 0 && t.global_batch > 0)
    MS_CHECK(t.global_batch % (p.dp * t.batch_size) == 0,
             "config: train.global_batch={} is not divisible by parallel.dp={} x train.batch_size={}",
             t.global_batch, p.dp, t.batch_size);
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
}

}  // namespace ms
