// test_checkpoint_safety: checkpoints and run folders that do not belong to this run (issue 22).
//  - Tensor shapes: a checkpoint edited consistently (manifest shape and entries, the safetensors
//    header and data, size and XXH64) so that a tensor is larger or smaller than the model's is
//    refused before any byte is copied: `ckpt inspect` fails naming the tensor, train.resume=PATH
//    fails naming it, auto skips it (and starts fresh: no other checkpoint).
//  - A truly full disk (a tmpfs under checkpoint.dir, mounted in a private mount namespace and
//    filled to the last byte, so not even a failure marker can be written): with 2 ranks every
//    save fails naming ENOSPC; rank 0 uses its own outcome and learns rank 1's failure at a step
//    boundary (no disk needed), never waiting for checkpoint.timeout_s; training goes to the end.
//  - Two jobs on one run folder: while a job runs, a second one on its train.out_dir, or with its
//    checkpoint folder as checkpoint.dir, stops with an error naming the key, the folder and the
//    holder's pid, having written nothing there; once the first is SIGKILLed the folder is free.
//  - Clean-up removes only this format's own temporaries, and retention only this run's (lineage's)
//    checkpoints: another job's step folder, foreign *.tmp.* and .tmp-* entries stay.
//  - Another data stream (other data files, seed, sequence length): train.resume=PATH refuses it
//    naming what differs; auto resumes with a warning naming it.
//  - `latest` is read as a short plain file: a symlink (whose target's text must not reach the log)
//    or a long file is named as such and the step folders are tried instead.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/safetensors.h"  // load_safetensors, save_safetensors
#include "ckpt/ckpt_runs.h"
#include "common/processes.h"
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

TEST(CheckpointSafety, FullDiskNeverStallsTraining) {
  CkptRuns runs("ckpt_enospc");
  const std::string ck = runs.dir() + "/full";
  fs::create_directories(ck);
  // 256 KiB (a rank's checkpoint file is MiBs), filled; only this command's processes see it.
  const std::string full_fs = "unshare -m sh -c 'mount -t tmpfs -o size=256k megascale-test " + ck +
                              " && { dd if=/dev/zero of=" + ck + "/fill bs=4k >/dev/null 2>&1; exec \"$0\" \"$@\"; }' ";
  const CmdResult r = runs.run(full_fs + launch(2), "run", pp_layout(2, 1, 1, false) + " --checkpoint.every=2 "
                               "--checkpoint.timeout_s=60 --checkpoint.dir=" + ck);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(runs.step_losses("run").size(), 6u) << "training went on past the failed saves\n" << r.output;
  for (int step : {2, 6}) EXPECT_TRUE(contains(r.output, fmt::format("step {} not published", step))) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "No space left on device")) << r.output;
  // Rank 1's failure reached rank 0 without its marker, and nothing waited for the timeout.
  EXPECT_TRUE(contains(r.output, "announced at a step boundary")) << r.output;
  EXPECT_FALSE(contains(r.output, "did not arrive within checkpoint.timeout_s")) << r.output;
}

TEST(CheckpointSafety, SecondJobOnARunFolderIsRefused) {
  CkptRuns runs("ckpt_lock");
  std::vector<std::string> argv;
  {
    std::istringstream words(megascale_bin() + " train " + runs.dir() + "/cfg.toml --train.out_dir=" + runs.dir() +
                             "/run --train.steps=100000 --checkpoint.every=2");
    for (std::string w; words >> w;) argv.push_back(w);
  }
  const auto start = Clock::now();
  Proc first = spawn(argv, {}, runs.dir() + "/first.out");
  wait_all({&first}, start, 120, [&] { return runs.step_losses("run").count(3) > 0; });
  ASSERT_FALSE(first.done) << first.output();
  const std::string log_before = slurp(runs.dir() + "/run/log.jsonl");
  const std::string holder = "process " + std::to_string(first.pid) + " holds the folder's lock";
  // The same train.out_dir.
  const CmdResult same = runs.run(megascale_bin(), "run", "--train.exit_after=1 --train.seed=7");
  EXPECT_EQ(same.code, 1) << same.output;
  EXPECT_TRUE(contains(same.output, "train.out_dir = " + runs.dir() + "/run: another job is using this folder"))
      << same.output;
  EXPECT_TRUE(contains(same.output, holder)) << same.output;
  // Another train.out_dir, but the first job's checkpoints as checkpoint.dir.
  const CmdResult ck = runs.run(megascale_bin(), "other", "--train.exit_after=1 --checkpoint.dir=" + runs.dir() +
                                                              "/run/checkpoints");
  EXPECT_EQ(ck.code, 1) << ck.output;
  EXPECT_TRUE(contains(ck.output, "checkpoint.dir = " + runs.dir() + "/run/checkpoints: another job")) << ck.output;
  EXPECT_TRUE(contains(ck.output, holder)) << ck.output;
  EXPECT_FALSE(first.done) << "the first job was disturbed:\n" << first.output();
  // Nothing of the refused jobs in the first one's log (it only grew by its own steps).
  const std::string log_after = slurp(runs.dir() + "/run/log.jsonl");
  EXPECT_EQ(log_after.substr(0, log_before.size()), log_before);
  // A SIGKILLed job leaves no lock behind.
  kill(first.pid, SIGKILL);
  wait_all({&first}, start, 60);
  const CmdResult after = runs.run(megascale_bin(), "run", "--train.exit_after=1");
  EXPECT_EQ(after.code, 0) << after.output;
  EXPECT_TRUE(contains(after.output, "resumed from " + runs.dir() + "/run/checkpoints/step-")) << after.output;
}

std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

TEST(CheckpointSafety, CleanupRemovesOnlyItsOwnFiles) {
  CkptRuns runs("ckpt_foreign");
  const std::string ck = runs.dir() + "/run/checkpoints";
  fs::create_directories(ck + "/step-00000001");  // another job's
  std::ofstream(ck + "/step-00000001/weights.bin") << "theirs";
  std::ofstream(ck + "/notes.tmp.1") << "theirs";
  fs::create_directories(ck + "/.tmp-theirs");
  fs::create_directories(ck + "/.tmp-step-00000004-0123456789abcdef");  // this format's, left by a dead run
  const CmdResult first = runs.run(megascale_bin(), "run", "--checkpoint.every=2 --checkpoint.keep_last=1 "
                                                           "--train.exit_after=2");
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_EQ(entries(ck), (std::set<std::string>{".tmp-theirs", "latest", "notes.tmp.1", "step-00000001",
                                                "step-00000002"}));
  // The resumed run continues the lineage: its retention removes step 2 and 4, nothing foreign.
  runs.train(megascale_bin(), "run", "--checkpoint.every=2 --checkpoint.keep_last=1");
  EXPECT_EQ(entries(ck), (std::set<std::string>{".tmp-theirs", "latest", "notes.tmp.1", "step-00000001",
                                                "step-00000006"}));
  EXPECT_EQ(slurp(ck + "/step-00000001/weights.bin"), "theirs");
}

TEST(CheckpointSafety, ResumeOnAnotherDataStream) {
  CkptRuns runs("ckpt_stream");
  const CmdResult base = runs.run(megascale_bin(), "base", "--checkpoint.every=2 --train.exit_after=2");
  ASSERT_EQ(base.code, 0) << base.output;
  const std::string ck = runs.ckpt("base", 2);
  const auto stream = nlohmann::json::parse(slurp(ck + "/manifest.json"))["data_stream"];
  ASSERT_TRUE(stream.is_object()) << "the manifest records the data stream";
  const std::string seed = std::to_string(stream["seed"].get<int>()), T = std::to_string(stream["seq_len"].get<int>());
  fs::copy_file(runs.dir() + "/train.bin", runs.dir() + "/other.bin");
  struct Case { std::string extra, diff; };
  for (const Case& c : {Case{"--train.seed=7", "train.seed: checkpoint " + seed + ", this run 7"},
                        Case{"--train.seq_len=32", "train.seq_len: checkpoint " + T + ", this run 32"},
                        Case{"--data.train=" + runs.dir() + "/other.bin", "data.train files (names, sizes, checksums)"}}) {
    const CmdResult path = runs.run(megascale_bin(), "path", "--train.exit_after=1 --train.resume=" + ck + " " + c.extra);
    EXPECT_EQ(path.code, 1) << path.output;
    EXPECT_TRUE(contains(path.output, "saved for another data stream: " + c.diff)) << path.output;
    EXPECT_FALSE(contains(path.output, "resumed from")) << path.output;
  }
  // The same stream resumes without a word; auto on another one says so loudly and resumes.
  const CmdResult same = runs.run(megascale_bin(), "same", "--train.exit_after=1 --train.resume=" + ck);
  EXPECT_EQ(same.code, 0) << same.output;
  EXPECT_FALSE(contains(same.output, "another data stream")) << same.output;
  fs::copy(runs.dir() + "/base", runs.dir() + "/auto", fs::copy_options::recursive);
  const CmdResult aut = runs.run(megascale_bin(), "auto", "--train.exit_after=1 --train.seed=7");
  EXPECT_EQ(aut.code, 0) << aut.output;
  EXPECT_TRUE(contains(aut.output, "WARNING: checkpoint step-00000002 saved for another data stream: train.seed"))
      << aut.output;
  EXPECT_TRUE(contains(aut.output, "resumed from")) << aut.output;
}

TEST(CheckpointSafety, LatestIsAShortPlainFile) {
  CkptRuns runs("ckpt_latest");
  const CmdResult base = runs.run(megascale_bin(), "base", "--checkpoint.every=2 --train.exit_after=2");
  ASSERT_EQ(base.code, 0) << base.output;
  std::ofstream(runs.dir() + "/secret.txt") << "TOPSECRET-TEXT\n";
  for (const std::string name : {"link", "long"}) {
    fs::copy(runs.dir() + "/base", runs.dir() + "/" + name, fs::copy_options::recursive);
    const std::string latest = runs.dir() + "/" + name + "/checkpoints/latest";
    fs::remove(latest);
    if (name == "link") fs::create_symlink(runs.dir() + "/secret.txt", latest);
    else std::ofstream(latest) << std::string(100000, 'x');
    const CmdResult inspect = run_cmd(megascale_bin() + " ckpt inspect " + runs.dir() + "/" + name + "/checkpoints");
    EXPECT_EQ(inspect.code, 1) << inspect.output;
    EXPECT_FALSE(contains(inspect.output, "TOPSECRET")) << inspect.output;
    const CmdResult r = runs.run(megascale_bin(), name, "--train.exit_after=1");
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, name == "link" ? "latest: is a symbolic link" : "latest: longer than 64 bytes"))
        << r.output;
    EXPECT_FALSE(contains(r.output, "TOPSECRET")) << r.output;
    EXPECT_FALSE(contains(r.output, "xxxxxxxx")) << r.output;
    EXPECT_TRUE(contains(r.output, "resumed from " + runs.ckpt(name, 2))) << r.output;
  }
}

}  // namespace
}  // namespace ms::testing
