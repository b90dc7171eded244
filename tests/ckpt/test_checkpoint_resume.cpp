// test_checkpoint_resume: exact resume and resharding, as real training processes.
//  - Exact resume (issue 11): train 6 steps uninterrupted; separately train 3 (saving at step 2, its
//    copy made beside step 3, and at the stop after step 3), resume (train.resume=auto) and finish:
//    the losses of steps 4..6, the data position in the checkpoint and the final weights are
//    bit-identical; resumed from the step-2 checkpoint, steps 3..6 too. One process and a 2x2x2
//    DP x TP x PP layout, fp32 and bf16; dp 2 x pp 2 under mpirun.
//  - Recovery read: under 2x2x2 only DP rank 0 of each data-parallel group reads files; within a
//    group every file is read at most once, and every file of the checkpoint is read by some group.
//  - Resharding: the 2x2x2 checkpoint resumed on one process, on tp = 2 alone and on a smaller DP
//    (dp = 1, tp = 2, pp = 2: a machine lost): steps 4..6 within the pipeline suite's tolerance of
//    the uninterrupted 2x2x2 run.
//  - SIGTERM: a run told to stop mid-training saves at the next step boundary and exits 0, on one
//    process and on every rank under `megascale launch`; the resumed run is exact.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <set>
#include <thread>

#include "ckpt/ckpt_runs.h"
#include "common/processes.h"

namespace ms::testing {
namespace {

const std::string k222 = pp_layout(2, 2, 2, false);

TEST(CheckpointResume, ExactSingleProcessFp32) { exact_resume(megascale_bin(), "", "fp32"); }
// A stage-1 copy still running when step 3's optimizer update comes: the update waits for it (else
// the step-2 checkpoint would hold step 3's weights and the resume from it would not be exact).
TEST(CheckpointResume, ExactWithSlowStage1Copy) { exact_resume(megascale_bin(), "", "fp32", "ckpt:point=slow_copy:step=2"); }
TEST(CheckpointResume, ExactSingleProcessBf16) { exact_resume(megascale_bin(), "", "bf16"); }
TEST(CheckpointResume, Exact2x2x2Fp32) { exact_resume(launch(8), k222, "fp32"); }
TEST(CheckpointResume, Exact2x2x2Bf16) { exact_resume(launch(8), k222, "bf16"); }
// The same on MPI (mpirun): dp 2 x pp 2, one reader per data-parallel group there too.
TEST(CheckpointResume, ExactOnMpi) { exact_resume(mpirun(4), pp_layout(2, 1, 2, false), "fp32"); }

TEST(CheckpointResume, OneReaderPerDataParallelGroupAndResharding) {
  CkptRuns runs("ckpt_reshard");
  runs.train(launch(8), "src", k222);
  const CmdResult saved = runs.run(launch(8), "ck", k222 + " --train.exit_after=3");
  ASSERT_EQ(saved.code, 0) << saved.output;
  const std::string ck = runs.ckpt("ck", 3);
  const auto manifest = nlohmann::json::parse(slurp(ck + "/manifest.json"));
  std::set<std::string> all_files;
  for (const auto& f : manifest["files"]) all_files.insert(f["name"].get<std::string>());
  EXPECT_EQ(all_files.size(), 12u) << "8 ranks' files plus the TP-replicated files of the 4 TP rank 0s";

  // Same layout: reads per rank from restore_rank<R>.json.
  runs.train(launch(8), "ck", k222);
  std::map<std::pair<int, int>, std::map<std::string, int>> reads_per_group;  // (tp, pp) -> file -> reads
  std::set<std::string> read_somewhere;
  for (int r = 0; r < 8; r++) {
    const auto j = nlohmann::json::parse(slurp(runs.dir() + "/ck/restore_rank" + std::to_string(r) + ".json"));
    const int dp = j["dp"].get<int>();
    if (dp != 0) {
      EXPECT_EQ(j["files_read"].get<int>(), 0) << "rank " << r << " (dp " << dp << ") read files";
    }
    for (const auto& f : j["files"]) {
      reads_per_group[{j["tp"].get<int>(), j["pp"].get<int>()}][f.get<std::string>()]++;
      read_somewhere.insert(f.get<std::string>());
    }
  }
  EXPECT_EQ(reads_per_group.size(), 4u) << "every data-parallel group has its reader";
  for (const auto& [g, files] : reads_per_group)
    for (const auto& [f, n] : files) EXPECT_EQ(n, 1) << f << " read " << n << " times in group tp " << g.first << " pp " << g.second;
  EXPECT_EQ(read_somewhere, all_files);
  runs.expect_same_losses("src", "ck", 4, 6);

  // Other layouts continue with the source layout's losses (its tolerance: fp32 sums associate differently).
  const std::string path = " --train.resume=" + ck;
  struct Target { std::string name, prefix, layout; };
  for (const Target& t : {Target{"one", megascale_bin(), ""}, Target{"tp2", launch(2), pp_layout(1, 2, 1, false)},
                          Target{"dp1", launch(4), pp_layout(1, 2, 2, false)}}) {
    const std::string out = runs.train(t.prefix, t.name, t.layout + path);
    EXPECT_NE(out.find("resumed from " + ck), std::string::npos) << t.name << "\n" << out;
    const auto src = runs.step_losses("src"), got = runs.step_losses(t.name);
    EXPECT_EQ(got.size(), 3u) << t.name << ": steps 4..6 only";
    for (int s = 4; s <= 6; s++) {
      ASSERT_TRUE(got.count(s)) << t.name << " step " << s;
      EXPECT_LE(std::fabs(got.at(s) - src.at(s)) / src.at(s), kPpLossRel) << t.name << " step " << s;
    }
  }
}

// SIGTERM to `prefix train` once step 2 is logged: exit 0 with a checkpoint at the boundary it
// stopped at (k); the resumed run's steps after k equal an uninterrupted run's.
void preempt(const std::string& prefix, const std::string& layout) {
  CkptRuns runs("ckpt_sigterm");
  std::vector<std::string> argv;
  {
    std::istringstream words(prefix + " train " + runs.dir() + "/cfg.toml --train.out_dir=" + runs.dir() +
                             "/run --train.steps=400" + layout);
    for (std::string w; words >> w;) argv.push_back(w);
  }
  const auto start = Clock::now();
  Proc p = spawn(argv, {}, runs.dir() + "/run.out");
  wait_all({&p}, start, 120, [&] { return runs.step_losses("run").count(2) > 0; });
  ASSERT_FALSE(p.done) << "the run ended before it was told to stop:\n" << p.output();
  kill(p.pid, SIGTERM);
  wait_all({&p}, start, 120);
  ASSERT_EQ(p.code, 0) << p.output();
  const int k = static_cast<int>(runs.step_losses("run").rbegin()->first);
  ASSERT_LT(k, 400) << p.output();
  EXPECT_EQ(runs.latest("run"), CkptRuns::fmt_step(k)) << p.output();
  EXPECT_NE(p.output().find("SIGTERM/SIGINT"), std::string::npos) << p.output();
  // Resume for 3 more steps; the uninterrupted run stops at the same step.
  const std::string more = " --train.steps=400" + layout;
  const CmdResult resumed = runs.run(prefix, "run", more + " --train.exit_after=3");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  const CmdResult whole = runs.run(prefix, "whole", more + " --train.exit_after=" + std::to_string(k + 3));
  ASSERT_EQ(whole.code, 0) << whole.output;
  runs.expect_same_losses("whole", "run", 1, k + 3);
}

TEST(CheckpointResume, SigtermSavesAndExitsZero) { preempt(megascale_bin(), ""); }
TEST(CheckpointResume, SigtermToLauncherSavesOnEveryRank) { preempt(launch(2), pp_layout(2, 1, 1, false)); }

}  // namespace
}  // namespace ms::testing

namespace ms::testing {
namespace {

// keep_last 2 and keep_every 4 of saves at every step: steps 4, 5 and 6 remain. (Saves persisted
// before the next step, checkpoint.async=false: an asynchronous save still in flight at the next
// step would skip that one.)
TEST(CheckpointResume, RetentionKeepsLastAndEveryMth) {
  CkptRuns runs("ckpt_keep");
  runs.train(megascale_bin(), "run", "--checkpoint.every=1 --checkpoint.keep_last=2 --checkpoint.keep_every=4 "
             "--checkpoint.async=false");
  std::set<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(runs.dir() + "/run/checkpoints"))
    left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"latest", "step-00000004", "step-00000005", "step-00000006"}));
  EXPECT_EQ(runs.latest("run"), "step-00000006");
}

// Two snapshot buffers: a save queues behind one being persisted; with both taken (step 2's write
// slowed by a second, a save at every step) a save is skipped, never waited for inside a step, and
// the log says so (issue 22: a stalled writer stalled the steps); the final save waits for the
// others after the last step.
TEST(CheckpointResume, SaveBehindABusyWriterIsSkippedAndSaysSo) {
  CkptRuns runs("ckpt_busy");
  const std::string out = runs.train("MEGASCALE_FAULT=ckpt:point=slow_write:step=2 " + megascale_bin(), "run",
                                     "--checkpoint.every=1");
  EXPECT_NE(out.find("save skipped: the save of step "), std::string::npos) << out;
  EXPECT_EQ(out.find("waiting for the previous save's writer"), std::string::npos) << out;
  EXPECT_NE(out.find("step 1: stage 1 stopped training"), std::string::npos) << "the first save is not skipped\n" << out;
  EXPECT_NE(out.find("step 2: stage 1 stopped training"), std::string::npos) << "one save queues behind another\n" << out;
  EXPECT_NE(out.find("step 6: stage 1 stopped training"), std::string::npos) << "the final save is not skipped\n" << out;
  EXPECT_EQ(runs.latest("run"), "step-00000006");
}

}  // namespace
}  // namespace ms::testing

namespace ms::testing {
namespace {

// `megascale ckpt inspect` verifies a 2x2x2 checkpoint; `ckpt export` writes the same Hugging Face
// folder the run itself exported (byte for byte), which PyTorch loads.
TEST(CheckpointResume, InspectAndExportFromAnyLayout) {
  CkptRuns runs("ckpt_export");
  runs.train(launch(8), "run", k222 + " --checkpoint.every=6");
  const std::string root = runs.dir() + "/run/checkpoints";
  const CmdResult inspect = run_cmd(megascale_bin() + " ckpt inspect " + root);
  EXPECT_EQ(inspect.code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("step 6, 3072 tokens, data at epoch 0 sample 48"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("saved by layout dp=2 tp=2 pp=2"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("OK: 12 of 12 files verified"), std::string::npos) << inspect.output;
  const CmdResult exp = run_cmd(megascale_bin() + " ckpt export " + root + " " + runs.dir() + "/exported");
  ASSERT_EQ(exp.code, 0) << exp.output;
  for (const char* f : {"model.safetensors", "config.json"})
    EXPECT_TRUE(slurp(runs.dir() + "/exported/" + f) == slurp(runs.dir() + "/run/model/" + f)) << f;
  const CmdResult torch = run_cmd(std::string(torch_python()) + " -c \"import sys, json, torch; sys.path.insert(0, '" +
                                  MEGASCALE_SOURCE_DIR + "/tests/py'); import stio; d = '" + runs.dir() +
                                  "/exported'; c = json.load(open(d + '/config.json')); "
                                  "w = {k: torch.from_numpy(v) for k, v in stio.load(d + '/model.safetensors').items()}; "
                                  "e = w['transformer.wte.weight']; assert tuple(e.shape) == (c['vocab_size'], c['n_embd']); "
                                  "assert all(torch.isfinite(t).all() for t in w.values()); print('torch loaded', len(w))\"");
  EXPECT_EQ(torch.code, 0) << torch.output;
  EXPECT_NE(torch.output.find("torch loaded"), std::string::npos) << torch.output;
  // A damaged file fails inspect, naming it.
  std::filesystem::resize_file(root + "/step-00000006/rank-00003.safetensors", 100);
  const CmdResult bad = run_cmd(megascale_bin() + " ckpt inspect " + root);
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_NE(bad.output.find("rank-00003.safetensors: 100 bytes, the manifest says"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("FAILED: 11 of 12 files verified"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace ms::testing
