// test_slow_straggler_descheduled: a straggler of another cause than extra work, on a real dp2 x pp2
// run under `megascale launch` with the default straggler margin and window: the test stops rank 1
// (pp=0 dp=1) from outside for 15 ms of every 50 ms (SIGSTOP / SIGCONT, as a rank descheduled by
// a noisy neighbour would be: its CPU time does not grow, its wall time does). The period is shorter
// than a step's compute segments (~30-50 ms) so that every step loses about the same share: with
// 30 ms of every 100 ms a step lost anything from none to most of a stop, rank 1 was slow in 17..21
// of 30 steps and one run in three fell under the 60% chronic rule; with 15 of 50 it was slow in
// 23..27 of 30 (eight runs here). The log's last
// summary and `megascale heatmap` name rank 1 (its compute wall time, obs/straggler.h), never its
// stage peer rank 0 (the one that waits for it). Stage 1 is not asserted on: on this 2-core machine
// under other processes' load a rank of it really lost up to 17% of its compute wall time in clean
// runs and is then rightly named (docs/observability.md "Stragglers"); the no-false-alarm property
// of the defaults is tested on synthetic noise (tests/obs/test_straggler.cpp).
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/layout_runs.h"  // LayoutRuns, launch
#include "common/test_util.h"

namespace {

using namespace ms::testing;

constexpr int kSteps = 40;

// dp = 2 x pp = 2, a model large enough that a step's compute takes ~100 ms of wall time (cells under
// a few ms vary by scheduling quanta), the straggler options at their defaults.
std::string descheduled_config() {
  return "[model]\nn_layer = 4\nn_head = 4\nn_embd = 256\nvocab_size = 512\nmax_seq_len = 128\n"
         "[optim]\nlr = 1e-3\nwarmup_steps = 2\n"
         "[train]\nsteps = " + std::to_string(kSteps) + "\nbatch_size = 4\nseq_len = 128\nglobal_batch = 16\n"
         "eval_every = 0\nsample_tokens = 0\nthreads = 1\nprogress = \"lines\"\n"
         "[parallel]\ndp = 2\npp = 2\n"
         "[obs]\nsummary_every = 10\n";
}

// The ranks named in "straggler: rank N ..." lines of a text.
std::set<int> named(const std::string& text) {
  std::set<int> out;
  const std::regex re("straggler: rank ([0-9]+) ");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it)
    out.insert(std::stoi((*it)[1]));
  return out;
}

// The part of a training log from its last summary ("steps N-M, ms per step") on.
std::string last_summary(const std::string& log) {
  const size_t at = log.rfind(", ms per step min/median/max");
  if (at == std::string::npos) return "";
  const size_t line = log.rfind('\n', at);
  return log.substr(line == std::string::npos ? 0 : line + 1);
}

class StragglerDescheduled : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runs_ = new LayoutRuns("ms_straggler_desched", descheduled_config()); }
  static void TearDownTestSuite() { delete runs_; }
  static LayoutRuns* runs_;
};
LayoutRuns* StragglerDescheduled::runs_ = nullptr;

TEST_F(StragglerDescheduled, ARankStoppedFromOutsideIsNamed) {
  const std::string run = runs_->dir() + "/stopped";
  std::atomic<bool> done{false};
  std::string out;
  std::thread trainer([&] {
    out = runs_->train(launch(4), "stopped", "");
    done = true;
  });
  // Rank 1's pid from its record file's header, then the duty cycle until the run ends.
  pid_t pid = 0;
  const std::string records = run + "/records/rank-00001.jsonl";
  while (!done && pid == 0) {
    std::ifstream f(records);
    std::string line;
    if (std::getline(f, line) && !f.eof()) pid = nlohmann::json::parse(line).value("pid", 0);
    if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int cycles = 0;
  while (!done && pid > 0) {
    if (::kill(pid, SIGSTOP) != 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    ::kill(pid, SIGCONT);
    std::this_thread::sleep_for(std::chrono::milliseconds(35));
    cycles++;
  }
  trainer.join();
  ASSERT_GT(pid, 0) << "rank 1's record header never appeared\n" << out;
  EXPECT_GT(cycles, 20) << out;
  const std::string last = last_summary(out);
  ASSERT_NE(last.find("steps 31-40"), std::string::npos) << out;
  EXPECT_EQ(named(last).count(1), 1u) << out;
  EXPECT_EQ(named(last).count(0), 0u) << out;  // its stage peer waits for it
  EXPECT_NE(last.find("straggler: rank 1 (pp=0 dp=1 tp=0) compute +"), std::string::npos) << out;
  // The heatmap report over the records, at its defaults (the same window and margin).
  const CmdResult h = run_cmd(megascale_bin() + " heatmap " + run);
  ASSERT_EQ(h.code, 0) << h.output;
  EXPECT_EQ(named(h.output).count(1), 1u) << h.output;
  EXPECT_EQ(named(h.output).count(0), 0u) << h.output;
}

}  // namespace
