// test_config: the dumps of the config tree. to_json parses as JSON and holds exactly the fields
// of list_fields, each under its section with its value and JSON type (on a config where every
// field was set away from its default, so reading defaults by mistake fails); the JSON rebuilds an
// identical config through set_field (every field of list_fields equal as text). to_toml reloads
// through load_toml to the same config too.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "base/cpu_features.h"  // cpu_has_amx_bf16, cpu_has_avx512_bf16
#include "config/config.h"

using namespace ms;

namespace {

// A config whose every field differs from its default: ints 1000 + i, floats 0.25 + i / 8 (exact
// in binary), bools flipped, choices another allowed value, strings "s<i>_<key>" (with characters
// JSON and TOML must escape).
Config everything_changed() {
  Config c;
  const Config d;
  const std::vector<FieldInfo> fields = list_fields(d);
  for (size_t i = 0; i < fields.size(); i++) {
    const FieldInfo& f = fields[i];
    std::string v;
    if (f.type == "int") v = std::to_string(1000 + i);
    else if (f.type == "float") v = fmt::format("{}", 0.25 + i / 8.0);
    else if (f.type == "bool") v = f.value == "true" ? "false" : "true";
    else if (f.type == "choice") v = f.choices.back() != f.value ? f.choices.back() : f.choices.front();
    else v = "s" + std::to_string(i) + "_" + f.key + " \"quoted\" \\ tab\t";
    set_field(c, f.key, v, "test");
  }
  return c;
}

std::map<std::string, std::string> as_map(const Config& c) {
  std::map<std::string, std::string> m;
  for (const FieldInfo& f : list_fields(c)) m[f.key] = f.value;
  return m;
}

TEST(ConfigDump, ToJsonHoldsEveryFieldWithItsValue) {
  const Config c = everything_changed();
  const std::vector<FieldInfo> fields = list_fields(c);
  ASSERT_GE(fields.size(), 40u);
  // Every field really changed (so the checks below cannot pass on defaults).
  const std::map<std::string, std::string> def = as_map(Config{});
  for (const FieldInfo& f : fields) EXPECT_NE(f.value, def.at(f.key)) << f.key;

  nlohmann::json j;
  ASSERT_NO_THROW(j = nlohmann::json::parse(to_json(c))) << to_json(c);
  ASSERT_TRUE(j.is_object());
  size_t leaves = 0;
  for (const auto& [sec, obj] : j.items()) {
    ASSERT_TRUE(obj.is_object()) << sec;
    leaves += obj.size();
  }
  EXPECT_EQ(leaves, fields.size()) << "to_json has fields list_fields does not know, or misses some";
  for (const FieldInfo& f : fields) {
    const size_t dot = f.key.find('.');
    const std::string sec = f.key.substr(0, dot), name = f.key.substr(dot + 1);
    ASSERT_TRUE(j.contains(sec) && j[sec].contains(name)) << f.key << " is missing from to_json";
    const nlohmann::json& v = j[sec][name];
    if (f.type == "int") {
      ASSERT_TRUE(v.is_number_integer()) << f.key << ": " << v;
      EXPECT_EQ(std::to_string(v.get<long long>()), f.value) << f.key;
    } else if (f.type == "float") {
      ASSERT_TRUE(v.is_number()) << f.key << ": " << v;
      EXPECT_EQ(static_cast<float>(v.get<double>()), std::stof(f.value)) << f.key;
    } else if (f.type == "bool") {
      ASSERT_TRUE(v.is_boolean()) << f.key << ": " << v;
      EXPECT_EQ(v.get<bool>() ? "true" : "false", f.value) << f.key;
    } else {
      ASSERT_TRUE(v.is_string()) << f.key << ": " << v;
      EXPECT_EQ(v.get<std::string>(), f.value) << f.key;
    }
  }
}

TEST(ConfigDump, ToJsonRoundTripsThroughSetField) {
  const Config c = everything_changed();
  const auto j = nlohmann::json::parse(to_json(c));
  Config back;
  for (const auto& [sec, obj] : j.items())
    for (const auto& [name, v] : obj.items()) {
      std::string text;
      if (v.is_string()) text = v.get<std::string>();
      else if (v.is_boolean()) text = v.get<bool>() ? "true" : "false";
      else if (v.is_number_integer()) text = std::to_string(v.get<long long>());
      else text = fmt::format("{:.9g}", v.get<double>());
      set_field(back, sec + "." + name, text, "json");
    }
  EXPECT_EQ(as_map(back), as_map(c));
}

TEST(ConfigDump, ToTomlRoundTripsThroughLoadToml) {
  const Config c = everything_changed();
  const std::string dir = ms::testing::make_temp_dir("config_toml");
  ms::testing::spit(dir + "/c.toml", to_toml(c));
  Config back;
  load_toml(back, dir + "/c.toml");
  EXPECT_EQ(as_map(back), as_map(c));
  std::filesystem::remove_all(dir);
}

}  // namespace

// train.precision = "auto" resolves at load to bf16 exactly when the CPU has bf16 units (the CPU
// feature test is base/cpu_features, checked against CPUID in its own test); the resolved config
// names the concrete value, and an unknown precision names 'auto' among the choices.
TEST(ConfigPrecision, AutoResolvesAtLoadToTheCpusBf16Units) {
  Config c;
  set_field(c, "train.precision", "auto", "test");
  const bool units = cpu_has_amx_bf16() || cpu_has_avx512_bf16();
  EXPECT_EQ(c.train.precision, units ? DType::kBF16 : DType::kF32);
  const std::string toml = to_toml(c);
  EXPECT_NE(toml.find(units ? "precision = 'bf16'" : "precision = 'fp32'"), std::string::npos) << toml;
  Config t;
  load_toml_text(t, "[train]\nprecision = \"auto\"\n", "inline");
  EXPECT_EQ(t.train.precision, c.train.precision);
  try {
    set_field(c, "train.precision", "fp16", "cli");
    ADD_FAILURE() << "fp16 accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'auto'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train.precision"), std::string::npos) << e.what();
  }
}

// Integers whose products would overflow are refused by validate(), naming the field (issue 22:
// pad_vocab_to = 2^31-1 overflowed the padded vocabulary and crashed).
TEST(ConfigBounds, OverflowingIntegersAreNamed) {
  struct Case { const char* key; const char* value; const char* named; };
  for (const Case& c : {Case{"model.pad_vocab_to", "2147483647", "model.pad_vocab_to=2147483647 must be in 1..65536"},
                        Case{"model.n_embd", "1073741824", "model.n_embd=1073741824 must be in 1..16384"},
                        Case{"model.n_layer", "2147483647", "model.n_layer=2147483647 must be in 1..65536"},
                        Case{"model.max_seq_len", "2147483647", "model.max_seq_len=2147483647 must be in 1..1048576"},
                        Case{"train.steps", "2147483647", "train.steps=2147483647 must be in 1..1000000000"}}) {
    Config cfg;
    cfg.data.train = "x.bin";
    set_field(cfg, c.key, c.value, "test");
    ms::testing::expect_error([&] { cfg.validate(); }, {c.named});
  }
  Config big;
  big.data.train = "x.bin";
  big.model.n_embd = 16384, big.model.n_head = 16, big.model.max_seq_len = 1 << 20, big.train.seq_len = 8;
  ms::testing::expect_error([&] { big.validate(); }, {"the embeddings are too large", "model.max_seq_len=1048576"});
}

// model.preset applies its family's defaults before the other keys of the same source, so explicit
// keys win wherever they stand (TOML tables iterate alphabetically; the command line in order).
TEST(ConfigPreset, PresetFirstThenExplicitKeysOfTheSameSource) {
  Config c;
  load_toml_text(c, "[model]\nnorm = \"layernorm\"\npreset = \"llama\"\n", "inline");
  EXPECT_EQ(c.model.norm, NormKind::kLayerNorm);
  EXPECT_EQ(c.model.positions, PositionKind::kRope);
  EXPECT_EQ(c.model.mlp, MlpKind::kSwiglu);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.bias, BiasKind::kNone);
  Config d;
  apply_overrides(d, {{"model.bias", "qkv"}, {"model.preset", "llama"}}, "command line");
  EXPECT_EQ(d.model.bias, BiasKind::kQkv);
  EXPECT_EQ(d.model.norm, NormKind::kRmsNorm);
  // A later source's preset resets the family; gpt2 is today's defaults.
  apply_overrides(d, {{"model.preset", "gpt2"}}, "command line");
  const ModelConfig fresh;
  EXPECT_EQ(d.model.norm, fresh.norm);
  EXPECT_EQ(d.model.bias, fresh.bias);
  EXPECT_EQ(d.model.tie_embeddings, fresh.tie_embeddings);
}

TEST(ConfigPreset, FamilyValuesAreValidatedByName) {
  auto expect_invalid = [](const std::string& toml, const std::string& needle) {
    Config c;
    c.data.train = "x";
    load_toml_text(c, toml, "inline");
    ms::testing::expect_error([&] { c.validate(); }, {needle});
  };
  expect_invalid("[model]\nn_head = 6\nn_kv_head = 4\n", "model.n_kv_head=4 must divide model.n_head=6");
  expect_invalid("[model]\npositions = \"rope\"\nn_embd = 30\nn_head = 2\n", "needs an even head size");
  expect_invalid("[model]\nrecompute = \"full\"\nrecompute_every = 7\nn_layer = 6\n", "model.recompute_every=7");
  expect_invalid("[model]\nnorm_eps = 0.0\n", "model.norm_eps=0");
  expect_invalid("[model]\nrope_theta = 1.0\n", "model.rope_theta=1");
  expect_invalid("[model]\nn_kv_head = 3\nn_head = 6\n[parallel]\ntp = 2\n", "does not divide the key/value heads");
  expect_invalid("[model]\nffn_hidden = 100\nn_head = 6\n[parallel]\ntp = 3\n", "does not divide the MLP width 100");
  Config c;
  ms::testing::expect_error([&] { load_toml_text(c, "[model]\nmlp = \"relu\"\n", "inline"); },
                            {"model.mlp='relu' must be 'gelu' or 'swiglu'"});
}
