// test_manifest: the checkpoint manifest and storage pieces on their own.
//  - A manifest round-trips through JSON; parse_manifest names the field of every defect: a newer
//    format version, a missing or mistyped field, an entry range that is empty, a tensor covered
//    twice or not at all, an entry for a tensor not declared, a file listed twice.
//  - model_difference lists the differing model fields; tensor_difference the tensors missing,
//    extra or of another shape than the model's (both ways).
//  - LocalStorage::write_file returns XXH64 of exactly the bytes on disk (computed independently
//    over the file), with direct I/O and buffered (tmpfs), leaves no temporary behind, and a file written from safetensors_parts reads
//    back through StMapped (and load_safetensors) with the same tensors.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "base/safetensors.h"
#include "ckpt/manifest.h"
#include "ckpt/storage.h"
#include "model/param_layout.h"
#include "common/test_util.h"

namespace ms {
namespace {

using testing::expect_error;

// Two tensors: "a" (4 elements, 2 TP parts, part 1 in two pieces) and "b" (3 elements, whole).
Manifest small_manifest() {
  Manifest m;
  m.step = 7;
  m.data = {1, 5};
  m.tokens = 123;
  m.model_hash = "0123456789abcdef";
  m.model = {{"n_layer", "2"}};
  m.config_toml = "[model]\nn_layer = 2\n";
  m.tp = 2;
  m.tensors["a"] = {{2, 2}, "rows"};
  m.tensors["b"] = {{3}, "replicated"};
  ManifestFile f0{"rank-00000.safetensors", 0, 0, 0, 0, 100, "00000000000000aa", {}};
  ManifestFile f1{"rank-00001.safetensors", 1, 0, 1, 0, 100, "00000000000000bb", {}};
  for (StateKind k : kStateKinds) {
    f0.entries.push_back({fmt::format("{}/a/0", state_kind_name(k)), "a", k, 2, 0, 0, 2});
    f0.entries.push_back({fmt::format("{}/b/0", state_kind_name(k)), "b", k, 1, 0, 0, 3});
    f1.entries.push_back({fmt::format("{}/a/1/0", state_kind_name(k)), "a", k, 2, 1, 0, 1});
    f1.entries.push_back({fmt::format("{}/a/1/1", state_kind_name(k)), "a", k, 2, 1, 1, 2});
  }
  m.files = {f0, f1};
  return m;
}

TEST(Manifest, RoundTrip) {
  const Manifest m = small_manifest();
  const Manifest back = parse_manifest(manifest_to_json(m), "m.json");
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.data.epoch, 1u);
  EXPECT_EQ(back.data.index, 5u);
  EXPECT_EQ(back.tokens, 123u);
  EXPECT_EQ(back.tp, 2);
  EXPECT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[1].entries.size(), 6u);
  EXPECT_EQ(manifest_to_json(back), manifest_to_json(m));
  EXPECT_EQ(coverage_problem(m), "");
}

// parse_manifest of m's JSON after `edit` fails with every one of `parts` in the message.
void expect_rejected(const std::function<void(nlohmann::json&)>& edit, const std::vector<std::string>& parts) {
  nlohmann::json j = nlohmann::json::parse(manifest_to_json(small_manifest()));
  edit(j);
  expect_error([&] { parse_manifest(j.dump(), "ck/manifest.json"); }, parts);
}

TEST(Manifest, DefectsAreNamed) {
  expect_rejected([](auto& j) { j["format_version"] = 2; }, {"ck/manifest.json", "format_version", "newer"});
  expect_rejected([](auto& j) { j.erase("step"); }, {"field 'step' is missing"});
  expect_rejected([](auto& j) { j["step"] = "7"; }, {"field 'step' is not an integer"});
  expect_rejected([](auto& j) { j["data"]["index"] = -1; }, {"data.index"});
  expect_rejected([](auto& j) { j["files"][0]["xxh64"] = "xyz"; }, {"files[0].xxh64", "16 hex digits"});
  expect_rejected([](auto& j) { j["files"][1]["entries"][0]["hi"] = 0; }, {"files[1].entries[0]", "empty or reversed"});
  expect_rejected([](auto& j) { j["files"][1]["entries"][1]["lo"] = 0; }, {"tensor 'a'", "part 1", "in two files"});
  expect_rejected([](auto& j) { j["files"][1]["entries"].erase(1); }, {"tensor 'a'", "part 1", "covers 1 of 2"});
  expect_rejected([](auto& j) { j["files"][0]["entries"][1]["tensor"] = "c"; }, {"tensor 'c' is not in 'tensors'"});
  expect_rejected([](auto& j) { j["files"][1]["name"] = "rank-00000.safetensors"; }, {"listed twice"});
  expect_rejected([](auto& j) { j["files"][0]["name"] = "../x"; }, {"not a plain file name"});
  expect_rejected([](auto& j) { j["tensors"]["b"]["shape"] = {0}; }, {"tensors.b.shape"});
  expect_error([] { parse_manifest("{", "ck/manifest.json"); }, {"ck/manifest.json", "not JSON"});
}

TEST(Manifest, ModelDifferenceNamesFields) {
  Config a, b;
  b.model.n_embd = a.model.n_embd * 2;
  Manifest m;
  m.model = model_fields(a);
  m.model_hash = model_config_hash(a.model);
  EXPECT_EQ(model_difference(m, a), "");
  EXPECT_EQ(model_difference(m, b), fmt::format("model.n_embd: checkpoint {}, config {}", a.model.n_embd, b.model.n_embd));
  EXPECT_NE(model_config_hash(a.model), model_config_hash(b.model));
}

// A checkpoint saved before the Llama family's fields existed lists only GPT-2's (and hashes them):
// it resumes into today's defaults (a GPT-2 model), not into a Llama-style one, and recomputation
// (memory, not values) may change on resume.
TEST(Manifest, OlderCheckpointsAndRecomputationResume) {
  static const char* kOld[] = {"vocab_size", "pad_vocab_to", "n_layer", "n_head", "n_embd", "max_seq_len", "block",
                               "attention", "window", "full_every", "init_std"};
  Config a;
  Manifest m;
  const auto all = model_fields(a);
  for (const char* k : kOld) m.model[k] = all.at(k);
  std::string text;  // "key=value\n" in key order
  for (const auto& [k, v] : m.model) text += k + "=" + v + "\n";
  m.model_hash = fmt::format("{:016x}", XXH64(text.data(), text.size(), 0));  // the older version's hash
  EXPECT_EQ(model_difference(m, a), "");
  Config r = a;
  r.model.recompute = RecomputeKind::kFull;
  EXPECT_EQ(model_difference(m, r), "");
  Config llama = a;
  llama.model.norm = NormKind::kRmsNorm;
  EXPECT_EQ(model_difference(m, llama), "model.norm: checkpoint layernorm (absent: its default), config rmsnorm");
}

// Direct I/O where the file system has it (the temporary folder), buffered where it does not
// (/dev/shm is tmpfs): the same bytes either way, sizes not a multiple of the block size included.
TEST(CheckpointStorage, WriteFileDirectAndBufferedGiveTheSameBytes) {
  std::vector<uint8_t> data(8 * 1048576 + 12345);
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  const std::string head = "header of 27 bytes, unaligned";
  for (const std::string& root : {testing::make_temp_dir("ckpt_direct"), std::string("/dev/shm/megascale-ckpt-test")}) {
    LocalStorage st(root);
    const uint64_t h = st.write_file("f.bin", {{head.data(), head.size()}, {data.data(), data.size()}});
    const std::string bytes = testing::slurp(root + "/f.bin");
    EXPECT_EQ(bytes.size(), head.size() + data.size()) << root;
    EXPECT_EQ(bytes, head + std::string(data.begin(), data.end())) << root;
    EXPECT_EQ(h, XXH64(bytes.data(), bytes.size(), 0)) << root;
    std::filesystem::remove_all(root);
  }
}

TEST(CheckpointStorage, WriteFileChecksumAndSafetensorsViews) {
  const std::string dir = testing::make_temp_dir("ckpt_storage");
  LocalStorage st(dir + "/root");
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const std::vector<int32_t> y = {7, 8};
  std::string header;
  const auto parts = safetensors_parts({{"x", DType::kF32, {2, 3}, x.data()}, {"y", DType::kI32, {2}, y.data()}},
                                       {{"step", "3"}}, header);
  bool halfway = false;
  const uint64_t h = st.write_file("f.safetensors", parts, [&] { halfway = true; });
  EXPECT_TRUE(halfway);
  const std::string bytes = testing::slurp(dir + "/root/f.safetensors");
  EXPECT_EQ(h, XXH64(bytes.data(), bytes.size(), 0));
  EXPECT_EQ(st.list(), std::vector<std::string>{"f.safetensors"}) << "no temporary left";
  const StMapped m(st.open("f.safetensors"));
  EXPECT_EQ(m.metadata().at("step"), "3");
  EXPECT_EQ(m.at("x").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(0, std::memcmp(m.at("x").data, x.data(), 24));
  const StFile f = load_safetensors(dir + "/root/f.safetensors");
  EXPECT_EQ(f.at("y").i32()[1], 8);
  expect_error([&] { st.read_text("missing.json"); }, {"missing.json", "cannot open"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ms

namespace ms {
namespace {

TEST(Manifest, TensorDifferenceBothWays) {
  ModelConfig mc;
  mc.n_layer = 1, mc.n_embd = 8, mc.n_head = 2, mc.vocab_size = 10, mc.pad_vocab_to = 16, mc.max_seq_len = 4;
  Manifest m;
  for (const ParamSpec& s : build_param_layout(mc).specs)
    m.tensors[s.name] = {{s.full_shape.begin(), s.full_shape.end()}, "replicated"};
  EXPECT_EQ(tensor_difference(m, mc), "");
  m.tensors[kHeadCopyName] = m.tensors.at("transformer.wte.weight");
  EXPECT_EQ(tensor_difference(m, mc), "") << "the pipeline's head copy of the embedding";
  Manifest bad = m;
  bad.tensors[kHeadCopyName].shape = {8, 8};
  EXPECT_EQ(tensor_difference(bad, mc),
            "tensor 'lm_head.weight' (the head's copy of the token embedding): checkpoint [8, 8], model [16, 8]");
  bad = m;
  bad.tensors.at("transformer.ln_f.bias").shape = {65536};
  EXPECT_EQ(tensor_difference(bad, mc), "tensor 'transformer.ln_f.bias': checkpoint [65536], model [8]");
  bad = m;
  bad.tensors.erase("transformer.ln_f.weight");
  bad.tensors["transformer.extra"] = {{3}, "replicated"};
  EXPECT_EQ(tensor_difference(bad, mc), "tensor 'transformer.ln_f.weight' [8] of the model is not in the checkpoint; "
                                        "tensor 'transformer.extra' [3] of the checkpoint is not part of the model");
}

}  // namespace
}  // namespace ms
