// test_checkpoint_safety: checkpoints and run folders that do not belong to this run (issue 22).
//  - Tensor shapes: a checkpoint edited consistently (manifest shape and entries, the safetensors
//    header and data, size and XXH64) so that a tensor is larger or smaller than the model's is
//    refused before any byte is copied: `ckpt inspect` fails naming the tensor, train.resume=PATH
//    fails naming it, auto skips it (and starts fresh: no other checkpoint).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/safetensors.h"  // load_safetensors, save_safetensors
#include "ckpt/ckpt_runs.h"
#include "ckpt/storage.h"      // xxh64_hex, xxh64_of

namespace ms::testing {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Gives `tensor` the whole shape `shape` in a one-process checkpoint (one file, one entry per kind),
// consistently: its data cut or padded with zeros, the entries' ranges, the manifest's shape, the
// file's size and XXH64. The result verifies file by file.
void reshape_tensor(const std::string& ckpt, const std::string& tensor, const std::vector<int64_t>& shape) {
  const std::string mpath = ckpt + "/manifest.json";
  auto m = nlohmann::json::parse(slurp(mpath));
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  m["tensors"][tensor]["shape"] = shape;
  ASSERT_EQ(m["files"].size(), 1u);
  auto& file = m["files"][0];
  const std::string fpath = ckpt + "/" + file["name"].get<std::string>();
  StFile st = load_safetensors(fpath);
  int edited = 0;
  for (auto& e : file["entries"]) {
    if (e["tensor"] != tensor) continue;
    ASSERT_EQ(e["lo"].get<int64_t>(), 0);
    e["hi"] = numel;
    const StTensor& old = st.at(e["key"].get<std::string>());
    std::vector<float> data(static_cast<size_t>(numel), 0.0f);
    std::copy(old.f32(), old.f32() + std::min<size_t>(old.numel(), data.size()), data.begin());
    st.tensors[e["key"].get<std::string>()] = st_f32(shape, data.data());
    edited++;
  }
  ASSERT_EQ(edited, 3) << "param, exp_avg and exp_avg_sq of " << tensor;
  save_safetensors(fpath, st);
  const std::string bytes = slurp(fpath);
  file["bytes"] = bytes.size();
  file["xxh64"] = xxh64_hex(xxh64_of(bytes.data(), bytes.size()));
  std::ofstream(mpath) << m.dump(1);
}

class TensorShapes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    runs_ = new CkptRuns("ckpt_shapes");
    const CmdResult r = runs_->run(megascale_bin(), "base", "--checkpoint.every=2 --train.exit_after=2");
    ASSERT_EQ(r.code, 0) << r.output;
    ASSERT_EQ(runs_->latest("base"), "step-00000002");
  }
  static void TearDownTestSuite() { delete runs_; }

  // A copy of the base run whose step-2 checkpoint holds `tensor` with `shape`; then inspect, an
  // explicit resume and auto all refuse it, naming `diff`.
  void expect_refused(const std::string& name, const std::string& tensor, const std::vector<int64_t>& shape,
                      const std::string& diff) {
    fs::copy(runs_->dir() + "/base", runs_->dir() + "/" + name, fs::copy_options::recursive);
    const std::string ck = runs_->ckpt(name, 2);
    reshape_tensor(ck, tensor, shape);
    const CmdResult inspect = run_cmd(megascale_bin() + " ckpt inspect " + ck);
    EXPECT_EQ(inspect.code, 1) << inspect.output;
    EXPECT_TRUE(contains(inspect.output, diff)) << inspect.output;
    EXPECT_TRUE(contains(inspect.output, "1 of 1 files verified")) << "the file itself verifies:\n" << inspect.output;
    const CmdResult path = runs_->run(megascale_bin(), name + "_path", "--train.exit_after=1 --train.resume=" + ck);
    EXPECT_EQ(path.code, 1) << path.output;
    EXPECT_TRUE(contains(path.output, diff)) << path.output;
    EXPECT_FALSE(contains(path.output, "resumed from")) << path.output;
    const CmdResult aut = runs_->run(megascale_bin(), name, "--train.exit_after=1");
    EXPECT_EQ(aut.code, 0) << aut.output;
    EXPECT_TRUE(contains(aut.output, "checkpoint step-00000002 skipped")) << aut.output;
    EXPECT_TRUE(contains(aut.output, diff)) << aut.output;
    EXPECT_TRUE(contains(aut.output, "no checkpoint verifies; starting from scratch")) << aut.output;
  }
  static CkptRuns* runs_;
};
CkptRuns* TensorShapes::runs_ = nullptr;

// 65536 elements where the model has 64: before the check, the restore wrote past its buffer.
TEST_F(TensorShapes, LargerTensorIsRefused) {
  expect_refused("larger", "transformer.ln_f.bias", {65536},
                 "tensor 'transformer.ln_f.bias': checkpoint [65536], model [64]");
}

// Half the embedding's rows: before the check, the resume went on with the other half zero.
TEST_F(TensorShapes, SmallerEmbeddingIsRefused) {
  const auto m = nlohmann::json::parse(slurp(runs_->ckpt("base", 2) + "/manifest.json"));
  const auto wte = m["tensors"]["transformer.wte.weight"]["shape"].get<std::vector<int64_t>>();
  ASSERT_EQ(wte.size(), 2u);
  expect_refused("smaller", "transformer.wte.weight", {wte[0] / 2, wte[1]},
                 fmt::format("tensor 'transformer.wte.weight': checkpoint [{}, {}], model [{}, {}]", wte[0] / 2, wte[1],
                             wte[0], wte[1]));
}

}  // namespace
}  // namespace ms::testing
