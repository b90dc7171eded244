// test_checkpoint_faults: saves that die or fail, and checkpoints that are damaged (issue 11).
//  - A rank killed during stage 1, a rank's writer killed halfway through its file (stage 2), rank 0
//    killed after the manifest but before the rename, and after the rename but before `latest`
//    (MEGASCALE_FAULT ckpt:point=..., ckpt/ckpt_fault.h): `latest` names a checkpoint that verifies
//    (`megascale ckpt inspect`), the resumed run's losses equal an uninterrupted run's, and the
//    dead run's temporary folder is gone once the next run starts.
//  - The disk full (RLIMIT_FSIZE below a checkpoint file's size): the save is reported as failed,
//    training goes on (checkpoint.on_failure=continue) or stops with an error (stop), `latest` keeps
//    the previous checkpoint, and the next resume is exact.
//  - Damaged checkpoints: a flipped byte, a truncated file, a missing manifest, a manifest from a
//    newer format version, `latest` naming a missing folder, a checkpoint of another model shape:
//    train.resume=auto names the problem and falls back to the previous checkpoint (none loaded
//    partially: the run continues exactly from the older one); train.resume=PATH fails naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "ckpt/ckpt_runs.h"

namespace ms::testing {
namespace {

namespace fs = std::filesystem;

bool has_tmp_folder(const std::string& ckpt_root) {
  for (const auto& e : fs::directory_iterator(ckpt_root))
    if (e.path().filename().string().starts_with(".tmp-")) return true;
  return false;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A 2-rank (dp = 2) run saving every 2 steps dies at step 4 at `fault`; the resumed run is exact.
void killed_during_save(const std::string& fault, const std::string& expect_latest) {
  CkptRuns runs("ckpt_kill");
  const std::string layout = pp_layout(2, 1, 1, false) + " --checkpoint.every=2";
  runs.train(launch(2), "whole", layout);
  // checkpoint.async=false for the dying run: step 2's save is persisted before step 3, so the save
  // of step 4 (where the fault is) is never skipped behind it.
  const CmdResult died = runs.run("MEGASCALE_FAULT=" + fault + " " + launch(2), "run",
                                  layout + " --checkpoint.async=false");
  ASSERT_NE(died.code, 0) << died.output;
  EXPECT_TRUE(contains(died.output, "killed by signal 9")) << died.output;
  EXPECT_EQ(runs.latest("run"), expect_latest) << died.output;
  const CmdResult inspect = run_cmd(megascale_bin() + " ckpt inspect " + runs.dir() + "/run/checkpoints");
  EXPECT_EQ(inspect.code, 0) << inspect.output;
  EXPECT_TRUE(contains(inspect.output, "OK: 2 of 2 files verified")) << inspect.output;
  const std::string resumed = runs.train(launch(2), "run", layout);
  EXPECT_TRUE(contains(resumed, "resumed from " + runs.dir() + "/run/checkpoints/" + expect_latest)) << resumed;
  EXPECT_FALSE(has_tmp_folder(runs.dir() + "/run/checkpoints"));
  runs.expect_same_losses("whole", "run", 1, 6);
  runs.expect_same_model("whole", "run");
}

TEST(CheckpointFaults, RankKilledInStage1) { killed_during_save("ckpt:point=stage1:rank=1:step=4", "step-00000002"); }
TEST(CheckpointFaults, WriterKilledMidFile) { killed_during_save("ckpt:point=mid_file:rank=1:step=4", "step-00000002"); }
TEST(CheckpointFaults, KilledBeforePublish) { killed_during_save("ckpt:point=before_publish:rank=0:step=4", "step-00000002"); }
TEST(CheckpointFaults, KilledBeforeLatest) { killed_during_save("ckpt:point=before_latest:rank=0:step=4", "step-00000002"); }

// A run that expects to resume skips the weights' random init (the restore sets every weight); when
// no checkpoint verifies after all, the init runs then: the run equals a fresh start bit for bit
// (2 ranks, ZeRO-2: the shards and the zero moments too).
TEST(CheckpointFaults, NoCheckpointVerifiesTrainsAsAFreshStart) {
  CkptRuns runs("ckpt_fresh");
  const std::string layout = pp_layout(2, 1, 1, false);
  runs.train(launch(2), "whole", layout);
  const CmdResult first = runs.run(launch(2), "run", layout + " --checkpoint.every=2 --train.exit_after=4");
  ASSERT_EQ(first.code, 0) << first.output;
  // Every checkpoint damaged: a flipped byte in each rank file.
  int damaged = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(runs.dir() + "/run/checkpoints"))
    if (e.path().extension() == ".safetensors") {
      std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(-4, std::ios::end);
      char c = 0;
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      f.seekp(-4, std::ios::end);
      f.write(&c, 1);
      damaged++;
    }
  ASSERT_GE(damaged, 2);
  std::filesystem::remove(runs.dir() + "/run/log.jsonl");
  const std::string again = runs.train(launch(2), "run", layout);
  EXPECT_TRUE(contains(again, "no checkpoint verifies; starting from scratch")) << again;
  runs.expect_same_losses("whole", "run", 1, 6);
  runs.expect_same_model("whole", "run");
}

TEST(CheckpointFaults, DiskFull) {
  CkptRuns runs("ckpt_full");
  runs.train(megascale_bin(), "whole", "");
  const CmdResult first = runs.run(megascale_bin(), "run", "--checkpoint.every=2 --train.exit_after=2");
  ASSERT_EQ(first.code, 0) << first.output;
  // 3000 KiB: the exported model (1.7 MiB) fits, a checkpoint file (5.0 MiB) does not.
  const std::string limited = "bash -c 'ulimit -f 3000; exec \"$0\" \"$@\"' " + megascale_bin();
  const CmdResult full = runs.run(limited, "run", "--checkpoint.every=2");
  EXPECT_EQ(full.code, 0) << full.output;
  EXPECT_TRUE(contains(full.output, "step 4 not published")) << full.output;
  EXPECT_TRUE(contains(full.output, "File too large")) << full.output;
  EXPECT_EQ(runs.step_losses("run").size(), 6u) << "training went on past the failed saves";
  EXPECT_EQ(runs.latest("run"), "step-00000002");
  EXPECT_FALSE(fs::exists(runs.ckpt("run", 4)));
  EXPECT_FALSE(has_tmp_folder(runs.dir() + "/run/checkpoints"));
  // on_failure = stop: the run ends with an error at the boundary after the failed save.
  const CmdResult stop = runs.run(limited, "stop_run", "--checkpoint.every=2 --checkpoint.on_failure=stop "
                                                       "--checkpoint.dir=" + runs.dir() + "/run/checkpoints");
  EXPECT_NE(stop.code, 0) << stop.output;
  EXPECT_TRUE(contains(stop.output, "checkpoint.on_failure=stop")) << stop.output;
  EXPECT_EQ(runs.latest("run"), "step-00000002");
  // The next resume, with room, is exact.
  fs::remove_all(runs.dir() + "/run/model");
  const std::string resumed = runs.train(megascale_bin(), "run", "");
  EXPECT_TRUE(contains(resumed, "(step 2,")) << resumed;
  runs.expect_same_losses("whole", "run", 1, 6);
  runs.expect_same_model("whole", "run");
}

// Checkpoints at steps 2 and 4 of one process; each case damages a copy of the run folder.
class DamagedCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    runs_ = new CkptRuns("ckpt_damaged");
    const CmdResult r = runs_->run(megascale_bin(), "base", "--checkpoint.every=2 --train.exit_after=4");
    ASSERT_EQ(r.code, 0) << r.output;
    ASSERT_EQ(runs_->latest("base"), "step-00000004");
  }
  static void TearDownTestSuite() { delete runs_; }

  // A copy of the base run folder under `name`.
  std::string copy(const std::string& name) {
    const std::string to = runs_->dir() + "/" + name;
    fs::copy(runs_->dir() + "/base", to, fs::copy_options::recursive);
    return to;
  }
  // Resumes the copy for one step (auto, or resume=PATH when path is set).
  CmdResult resume(const std::string& name, const std::string& extra = "") {
    return runs_->run(megascale_bin(), name, "--train.exit_after=1 " + extra);
  }
  // auto fell back to step 2 (naming `reason`) and continued exactly: step 3's loss is base's.
  void expect_fallback(const std::string& name, const CmdResult& r, const std::string& reason) {
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "checkpoint step-00000004 skipped")) << r.output;
    EXPECT_TRUE(contains(r.output, reason)) << r.output;
    EXPECT_TRUE(contains(r.output, "resumed from " + runs_->dir() + "/" + name + "/checkpoints/step-00000002"))
        << r.output;
    EXPECT_EQ(runs_->step_losses(name).at(3), runs_->step_losses("base").at(3));
  }
  void expect_path_error(const std::string& name, const std::string& reason) {
    const CmdResult r = resume(name + "_path", "--train.resume=" + runs_->dir() + "/" + name + "/checkpoints/step-00000004");
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_TRUE(contains(r.output, reason)) << r.output;
    EXPECT_FALSE(contains(r.output, "step     5/")) << "trained after a failed explicit resume:\n" << r.output;
  }
  static CkptRuns* runs_;
};
CkptRuns* DamagedCheckpoint::runs_ = nullptr;

TEST_F(DamagedCheckpoint, FlippedByte) {
  const std::string dir = copy("flip");
  flip_byte(dir + "/checkpoints/step-00000004/rank-00000.safetensors", 4096, 0x10);
  expect_path_error("flip", "rank-00000.safetensors: checksum xxh64");
  expect_fallback("flip", resume("flip"), "does not match the manifest's");
}

TEST_F(DamagedCheckpoint, TruncatedShard) {
  const std::string dir = copy("trunc");
  const std::string file = dir + "/checkpoints/step-00000004/rank-00000.safetensors";
  fs::resize_file(file, fs::file_size(file) / 2);
  expect_path_error("trunc", "rank-00000.safetensors: ");
  expect_fallback("trunc", resume("trunc"), "(truncated or replaced)");
}

TEST_F(DamagedCheckpoint, MissingManifest) {
  const std::string dir = copy("nomanifest");
  fs::remove(dir + "/checkpoints/step-00000004/manifest.json");
  expect_path_error("nomanifest", "manifest.json is missing");
  expect_fallback("nomanifest", resume("nomanifest"), "manifest.json is missing");
}

TEST_F(DamagedCheckpoint, NewerFormatVersion) {
  const std::string dir = copy("newer");
  const std::string m = dir + "/checkpoints/step-00000004/manifest.json";
  auto j = nlohmann::json::parse(slurp(m));
  j["format_version"] = 2;
  std::ofstream(m) << j.dump(1);
  expect_path_error("newer", "written by a newer megascale");
  expect_fallback("newer", resume("newer"), "'format_version' = 2");
}

TEST_F(DamagedCheckpoint, LatestNamesMissingFolder) {
  const std::string dir = copy("dangling");
  std::ofstream(dir + "/checkpoints/latest") << "step-00000099\n";
  const CmdResult r = resume("dangling");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "latest names 'step-00000099', which is not a checkpoint folder")) << r.output;
  EXPECT_TRUE(contains(r.output, "resumed from " + dir + "/checkpoints/step-00000004")) << r.output;
}

TEST_F(DamagedCheckpoint, AnotherModelShape) {
  copy("shape");
  // Both checkpoints were saved for n_embd = 64: auto names the difference and starts fresh.
  const CmdResult r = resume("shape", "--model.n_embd=32");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "saved for another model: model.n_embd: checkpoint 64, config 32")) << r.output;
  EXPECT_TRUE(contains(r.output, "no checkpoint verifies; starting from scratch")) << r.output;
  const CmdResult p = runs_->run(megascale_bin(), "shape_path", "--train.exit_after=1 --model.n_embd=32 --train.resume=" +
                                                                   runs_->dir() + "/shape/checkpoints/step-00000004");
  EXPECT_EQ(p.code, 1) << p.output;
  EXPECT_TRUE(contains(p.output, "model.n_embd: checkpoint 64, config 32")) << p.output;
}

}  // namespace
}  // namespace ms::testing

namespace ms::testing {
namespace {

TEST(CheckpointFaults, NonFiniteStateIsNeverPublished) {
  CkptRuns runs("ckpt_nan");
  // checkpoint.async=false: step 2's save is persisted before step 3, so step 4's is never skipped.
  const CmdResult r = runs.run("MEGASCALE_FAULT=ckpt:point=nan_state:step=4 " + megascale_bin(), "run",
                               "--checkpoint.every=2 --checkpoint.async=false");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "step 4 not published")) << r.output;
  EXPECT_TRUE(contains(r.output, "holds a non-finite param value (nan) at step 4")) << r.output;
  EXPECT_FALSE(fs::exists(runs.ckpt("run", 4)));
  EXPECT_EQ(runs.latest("run"), "step-00000006");
}

}  // namespace
}  // namespace ms::testing
