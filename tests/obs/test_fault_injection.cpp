// Fault injection for the restart tests (obs/fault_injection.h, ckpt/ckpt_fault.h; docs/observability.md
// "Fault injection"): the one MEGASCALE_FAULT grammar (checkpoint faults included), the attempt rule
// ($MEGASCALE_RESTART_COUNT: default attempt 0, attempt=K, attempt=all) and the named errors of
// malformed values; then the real `megascale train` on a tiny model: a crash at the first backward
// span of step 3 ends the process by SIGKILL after the stderr line and the "fault injected" event
// reached the record file, and does not fire on attempt 1; an `exit` fault ends it with code 1
// through the normal error path; a `nan` fault stops the run at the trainer's non-finite check, on
// every rank of a tensor-parallel pair although only one rank's loss was poisoned.
#include <gtest/gtest.h>
#include <stdlib.h>  // setenv, unsetenv

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "ckpt/ckpt_fault.h"
#include "common/layout_runs.h"
#include "common/processes.h"
#include "common/test_util.h"
#include "obs/fault_injection.h"
#include "obs/trace_sink.h"

namespace ms {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The ms::Error text of parsing `text` ("" if it parsed).
std::string fault_error(const std::string& text) {
  try {
    parse_faults(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Sets (or, with nullptr, unsets) environment variables for one test; restores none (every test
// that uses one sets what it needs).
void env(const char* name, const char* value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
}

class FaultEnv : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override {
    clear();
    init_faults(0);  // nothing set: inert again
  }
  static void clear() {
    env("MEGASCALE_FAULT", nullptr);
    env("MEGASCALE_CKPT_FAULT", nullptr);
    env("MEGASCALE_RESTART_COUNT", nullptr);
  }
};

TEST(FaultGrammar, EveryKind) {
  const auto f = parse_faults(
      "slow:rank=2:seg=forward:ratio=0.2:from=3;sleep:rank=1:step=4:seconds=1.5;crash:rank=2:step=5:seg=backward;"
      "crash:rank=0:step=2;hang:rank=3:step=6:seg=optimizer;stop:rank=1:step=7;nan:rank=0:step=8;"
      "exit:rank=1:step=9;exit:rank=1:step=10:code=3;selfcheck:host=4");
  ASSERT_EQ(f.size(), 10u);
  EXPECT_EQ(f[0].kind, "slow");
  EXPECT_EQ(f[0].seg, "forward");
  EXPECT_DOUBLE_EQ(f[0].ratio, 0.2);
  EXPECT_EQ(f[0].from, 3);
  EXPECT_EQ(f[1].kind, "sleep");
  EXPECT_DOUBLE_EQ(f[1].seconds, 1.5);
  EXPECT_EQ(f[2].kind, "crash");
  EXPECT_EQ(f[2].rank, 2);
  EXPECT_EQ(f[2].step, 5);
  EXPECT_EQ(f[2].seg, "backward");
  EXPECT_EQ(f[3].seg, "");
  EXPECT_EQ(f[4].kind, "hang");
  EXPECT_EQ(f[5].kind, "hang") << "stop is another name for hang";
  EXPECT_EQ(f[5].step, 7);
  EXPECT_EQ(f[6].kind, "nan");
  EXPECT_EQ(f[7].kind, "exit");
  EXPECT_EQ(f[7].code, 1);
  EXPECT_EQ(f[8].code, 3);
  EXPECT_EQ(f[9].kind, "selfcheck");
  EXPECT_EQ(f[9].host, 4);
  EXPECT_EQ(f[9].rank, -1);
  for (const FaultSpec& s : f) EXPECT_EQ(s.attempt, 0) << s.kind << ": default attempt 0";
  const auto spaced = parse_faults(" crash:rank=1:step=2 ; selfcheck: host=3 ;");
  ASSERT_EQ(spaced.size(), 2u);
  EXPECT_EQ(spaced[1].host, 3);
  EXPECT_TRUE(parse_faults("").empty());
  EXPECT_TRUE(parse_faults(";;").empty());
}

TEST(FaultGrammar, AttemptField) {
  const auto f = parse_faults("crash:rank=0:step=2:attempt=all;nan:rank=1:step=3:attempt=2;selfcheck:host=0:attempt=1");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0].attempt, FaultSpec::kAllAttempts);
  EXPECT_EQ(f[1].attempt, 2);
  EXPECT_EQ(f[2].attempt, 1);
  EXPECT_TRUE(attempt_applies(FaultSpec::kAllAttempts, 0));
  EXPECT_TRUE(attempt_applies(FaultSpec::kAllAttempts, 7));
  EXPECT_TRUE(attempt_applies(0, 0));
  EXPECT_FALSE(attempt_applies(0, 1));
  EXPECT_TRUE(attempt_applies(2, 2));
}

TEST(FaultGrammar, MalformedValuesAreNamed) {
  struct Case {
    const char* text;
    const char* names;  // besides MEGASCALE_FAULT and the entry
  };
  const Case cases[] = {
      {"boom:rank=1:step=2", "unknown kind 'boom'"},
      {"crash:rank=1:step=2:when=3", "unknown field 'when'"},
      {"crash:rank=x:step=2", "rank='x' is not a number"},
      {"crash:rank=1:step=2.5", "step='2.5' is not a number"},
      {"crash:rank=1:step=", "step='' is not a number"},
      {"crash:rank=1", "crash needs step=N"},
      {"hang:step=3", "rank=R (>= 0) is required"},
      {"crash:rank=1:step=2:seg=", "seg is empty"},
      {"crash:rank=1:step=2:attempt=first", "attempt='first'"},
      {"crash:rank=1:step=2:attempt=-1", "attempt='-1'"},
      {"nan:rank=1:step=2:seg=forward", "field 'seg' does not apply to nan"},
      {"exit:rank=1:step=2:seconds=1", "field 'seconds' does not apply to exit"},
      {"exit:rank=1:step=2:code=300", "code=300 is not in [0, 255]"},
      {"selfcheck:rank=1", "field 'rank' does not apply to selfcheck"},
      {"selfcheck:attempt=all", "selfcheck needs host=H"},
      {"sleep:rank=1:step=2", "sleep needs seconds"},
      {"slow:rank=1:ratio=0.5", "slow needs seg=NAME"},
      {"crash:rank=1:step", "'step' is not key=value"},
  };
  for (const Case& c : cases) {
    const std::string e = fault_error(std::string("crash:rank=0:step=1;") + c.text);
    EXPECT_TRUE(contains(e, "MEGASCALE_FAULT")) << c.text << ": " << e;
    EXPECT_TRUE(contains(e, std::string("entry '") + c.text + "'")) << c.text << ": " << e;
    EXPECT_TRUE(contains(e, c.names)) << c.text << ": " << e;
  }
}

TEST_F(FaultEnv, RestartCount) {
  EXPECT_EQ(restart_attempt(), 0);
  env("MEGASCALE_RESTART_COUNT", "");
  EXPECT_EQ(restart_attempt(), 0);
  env("MEGASCALE_RESTART_COUNT", "3");
  EXPECT_EQ(restart_attempt(), 3);
  env("MEGASCALE_RESTART_COUNT", "three");
  try {
    restart_attempt();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "MEGASCALE_RESTART_COUNT='three'")) << e.what();
  }
}

// init_faults keeps this rank's faults of this attempt only: nan and exit act where they should.
TEST_F(FaultEnv, RankAndAttemptSelectTheFaults) {
  env("MEGASCALE_FAULT", "nan:rank=1:step=3;nan:rank=1:step=5:attempt=1;nan:rank=1:step=6:attempt=all");
  init_faults(0);
  EXPECT_FALSE(fault_nan_loss(3)) << "another rank's fault";
  init_faults(1);
  EXPECT_FALSE(fault_nan_loss(2));
  EXPECT_TRUE(fault_nan_loss(3));
  EXPECT_FALSE(fault_nan_loss(5)) << "attempt=1 on attempt 0";
  EXPECT_TRUE(fault_nan_loss(6));
  env("MEGASCALE_RESTART_COUNT", "1");
  init_faults(1);
  EXPECT_FALSE(fault_nan_loss(3)) << "the default attempt 0 on attempt 1 (the restarted run is clean)";
  EXPECT_TRUE(fault_nan_loss(5));
  EXPECT_TRUE(fault_nan_loss(6));
  env("MEGASCALE_RESTART_COUNT", "2");
  init_faults(1);
  EXPECT_FALSE(fault_nan_loss(5));
  EXPECT_TRUE(fault_nan_loss(6));
}

TEST_F(FaultEnv, ExitThrowsAtItsStep) {
  env("MEGASCALE_FAULT", "exit:rank=0:step=2");
  init_faults(0);
  EXPECT_NO_THROW(fault_at_step_start(1));
  try {
    fault_at_step_start(2);
    ADD_FAILURE() << "no error at step 2";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "injected failure (MEGASCALE_FAULT exit) at rank 0 step 2 (attempt 0)")) << e.what();
  }
}

// The span hot path's flag is set only by crash / hang faults with a segment of this rank.
TEST_F(FaultEnv, SpanFlag) {
  init_faults(0);
  EXPECT_FALSE(span_faults_set());
  env("MEGASCALE_FAULT", "crash:rank=0:step=3;nan:rank=0:step=2;crash:rank=1:step=3:seg=backward");
  init_faults(0);
  EXPECT_FALSE(span_faults_set());
  env("MEGASCALE_FAULT", "hang:rank=0:step=3:seg=forward");
  init_faults(0);
  EXPECT_TRUE(span_faults_set());
  TraceSink::get().set_step(2);
  { TraceScope span("forward 0.0"); }  // step 2: nothing happens
  TraceSink::get().set_step(0);
  env("MEGASCALE_FAULT", "hang:rank=0:step=3:seg=forward:attempt=1");
  init_faults(0);
  EXPECT_FALSE(span_faults_set()) << "attempt 1 only";
}

TEST_F(FaultEnv, SelfCheck) {
  EXPECT_FALSE(fault_fails_selfcheck(0));
  env("MEGASCALE_FAULT", "selfcheck:host=1;crash:rank=0:step=2");
  EXPECT_FALSE(fault_fails_selfcheck(0));
  EXPECT_TRUE(fault_fails_selfcheck(1));
  env("MEGASCALE_RESTART_COUNT", "1");
  EXPECT_FALSE(fault_fails_selfcheck(1)) << "default attempt 0";
  env("MEGASCALE_FAULT", "selfcheck:host=1:attempt=all");
  EXPECT_TRUE(fault_fails_selfcheck(1));
  env("MEGASCALE_FAULT", "selfcheck:host=one");
  EXPECT_THROW(fault_fails_selfcheck(1), Error);
}

TEST(CkptFaultGrammar, FieldsAndErrors) {
  const auto f = parse_faults("ckpt:point=stage1:rank=1:step=4;ckpt:point=mid_file;"
                              "ckpt:point=nan_state:step=2:attempt=all;ckpt:point=before_latest:attempt=3");
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].kind, "ckpt");
  EXPECT_EQ(f[0].point, "stage1");
  EXPECT_EQ(f[0].rank, 1);
  EXPECT_EQ(f[0].step, 4);
  EXPECT_EQ(f[0].attempt, 0);
  EXPECT_EQ(f[1].rank, -1);
  EXPECT_EQ(f[1].step, -1);
  EXPECT_EQ(f[2].attempt, FaultSpec::kAllAttempts);
  EXPECT_EQ(f[3].attempt, 3);
  struct Case {
    const char* text;
    const char* names;
  };
  const Case cases[] = {
      {"ckpt:point=stage1:rnk=1", "unknown field 'rnk'"},
      {"ckpt:point=stage1:step=x", "step='x' is not a number"},
      {"ckpt:point=stage1:rank=-2", "rank=-2 is not >= 0"},
      {"ckpt:point=stage1:step", "'step' is not key=value"},
      {"ckpt:point=stage2:step=1", "unknown point 'stage2'"},
      {"ckpt:point=mid_file:attempt=later", "attempt='later'"},
      {"ckpt:rank=1", "ckpt needs point=P"},
      {"ckpt:point=mid_file:seg=forward", "field 'seg' does not apply to ckpt"},
  };
  for (const Case& c : cases) {
    const std::string e = fault_error(std::string("ckpt:point=mid_file:rank=0;") + c.text);
    EXPECT_TRUE(contains(e, "MEGASCALE_FAULT")) << c.text << ": " << e;
    EXPECT_TRUE(contains(e, std::string("entry '") + c.text + "'")) << c.text << ": " << e;
    EXPECT_TRUE(contains(e, c.names)) << c.text << ": " << e;
  }
}

// nan_state only marks (no signal): the attempt rule through ckpt_fault_point itself; a checkpoint
// fault is not a fault of the rank's steps (init_faults leaves it to ckpt_fault_point).
TEST_F(FaultEnv, CkptFaultAttempts) {
  env("MEGASCALE_FAULT", "ckpt:point=nan_state:rank=0:step=4");
  EXPECT_TRUE(ckpt_fault_point("nan_state", 0, 4));
  EXPECT_FALSE(ckpt_fault_point("nan_state", 1, 4));
  EXPECT_FALSE(ckpt_fault_point("nan_state", 0, 2));
  EXPECT_FALSE(ckpt_fault_point("stage1", 0, 4));
  init_faults(0);
  EXPECT_FALSE(span_faults_set());
  EXPECT_FALSE(fault_nan_loss(4));
  env("MEGASCALE_RESTART_COUNT", "1");
  EXPECT_FALSE(ckpt_fault_point("nan_state", 0, 4)) << "default attempt 0";
  env("MEGASCALE_FAULT", "ckpt:point=nan_state:step=4:attempt=all");
  EXPECT_TRUE(ckpt_fault_point("nan_state", 3, 4));
  env("MEGASCALE_FAULT", "ckpt:point=nan_state:step=4:attempt=1");
  EXPECT_TRUE(ckpt_fault_point("nan_state", 0, 4));
  env("MEGASCALE_RESTART_COUNT", "0");
  EXPECT_FALSE(ckpt_fault_point("nan_state", 0, 4));
  EXPECT_NO_THROW(check_ckpt_fault_env());
  env("MEGASCALE_FAULT", "ckpt:point=nan_state:step=four");
  EXPECT_THROW(ckpt_fault_point("nan_state", 0, 4), Error);
  EXPECT_THROW(check_ckpt_fault_env(), Error);
}

// The retired second variable is an error at start-up, not silently ignored.
TEST_F(FaultEnv, RetiredCkptVariableIsNamed) {
  env("MEGASCALE_CKPT_FAULT", "stage1:rank=1:step=4");
  try {
    check_ckpt_fault_env();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "MEGASCALE_CKPT_FAULT='stage1:rank=1:step=4' is no longer read")) << e.what();
    EXPECT_TRUE(contains(e.what(), "ckpt:point=P")) << e.what();
  }
}

// The trace sink's span hooks are installed only for the faults that need them.
TEST_F(FaultEnv, SpanHooksOnlyWhenNeeded) {
  env("MEGASCALE_FAULT", "slow:rank=0:seg=forward:ratio=0.5");
  init_faults(1);
  EXPECT_FALSE(slow_faults_set()) << "another rank's fault";
  init_faults(0);
  EXPECT_TRUE(slow_faults_set());
  EXPECT_FALSE(span_faults_set());
  { TraceScope span("backward 0.0"); }  // another segment: not slowed
  env("MEGASCALE_FAULT", nullptr);
  init_faults(0);
  EXPECT_FALSE(slow_faults_set());
}

// ---- The real binary ----

using testing::LayoutRuns;

// The "fault injected" events of a run's record file (rank r).
std::vector<nlohmann::json> fault_events(const std::string& run_dir, int rank) {
  std::vector<nlohmann::json> out;
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.jsonl", rank);
  std::ifstream f(run_dir + "/records/" + name);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("type", "") == "event" && j.value("name", "") == "fault injected") out.push_back(j);
  }
  return out;
}

class FaultRuns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runs_ = new LayoutRuns("fault_inj", testing::layout_config(32, 2)); }
  static void TearDownTestSuite() { delete runs_; }
  // `megascale train` (one process) with `env`, its output in <dir>/<name>.out.
  testing::Proc train(const std::string& name, const std::map<std::string, std::string>& vars,
                      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {testing::megascale_bin(), "train", runs_->dir() + "/cfg.toml",
                                     "--train.out_dir=" + runs_->dir() + "/" + name, "--obs.flush_ms=10000"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    testing::Proc p = testing::spawn(argv, vars, runs_->dir() + "/" + name + ".out");
    testing::wait_all({&p}, testing::Clock::now(), 120);
    return p;
  }
  static LayoutRuns* runs_;
};
LayoutRuns* FaultRuns::runs_ = nullptr;

// SIGKILL at the first backward span of step 3: steps 1-2 logged, 3 not; the stderr line and the
// event (flushed although obs.flush_ms is 10 s) say where and when.
TEST_F(FaultRuns, CrashAtBackwardIsSigkill) {
  const testing::Proc p = train("crash", {{"MEGASCALE_FAULT", "crash:rank=0:step=3:seg=backward"}});
  const std::string out = p.output();
  EXPECT_EQ(p.code, -SIGKILL) << out;
  EXPECT_TRUE(contains(out, "fault injected (MEGASCALE_FAULT): crash (SIGKILL) at rank 0 step 3 seg backward "
                            "(attempt 0; unix_ns ")) << out;
  EXPECT_EQ(runs_->losses("crash").size(), 2u) << "steps 1 and 2 only";
  const auto ev = fault_events(runs_->dir() + "/crash", 0);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0]["step"], 3);
  EXPECT_TRUE(contains(ev[0]["detail"].get<std::string>(), "crash (SIGKILL) at rank 0 step 3 seg backward")) << ev[0];
}

// The same fault on the restarted attempt (MEGASCALE_RESTART_COUNT=1): inert, the run finishes.
TEST_F(FaultRuns, CrashOnlyOnTheFirstAttempt) {
  const testing::Proc p = train("crash_retry", {{"MEGASCALE_FAULT", "crash:rank=0:step=3:seg=backward"},
                                                {"MEGASCALE_RESTART_COUNT", "1"}});
  EXPECT_EQ(p.code, 0) << p.output();
  EXPECT_EQ(runs_->losses("crash_retry").size(), 6u);
  EXPECT_TRUE(fault_events(runs_->dir() + "/crash_retry", 0).empty());
}

// exit: an ms::Error at the start of step 2, through the normal error path: exit code 1.
TEST_F(FaultRuns, ExitIsAnErrorWithCode1) {
  const testing::Proc p = train("exit", {{"MEGASCALE_FAULT", "exit:rank=0:step=2:attempt=all"},
                                         {"MEGASCALE_RESTART_COUNT", "4"}});
  const std::string out = p.output();
  EXPECT_EQ(p.code, 1) << out;
  EXPECT_TRUE(contains(out, "injected failure (MEGASCALE_FAULT exit) at rank 0 step 2 (attempt 4)")) << out;
  EXPECT_EQ(runs_->losses("exit").size(), 1u);
  EXPECT_EQ(fault_events(runs_->dir() + "/exit", 0).size(), 1u);
}

// nan on rank 1 of a tensor-parallel pair: both ranks stop at the trainer's non-finite check
// (exit code 1), rank 0 through the poisoned gradient norm, before any update.
TEST_F(FaultRuns, NanLossStopsEveryRank) {
  const std::string dir = runs_->dir() + "/nan";
  const testing::CmdResult r = testing::run_cmd(
      "MEGASCALE_FAULT=nan:rank=1:step=2 timeout 120 " + testing::launch(2) + " train " + runs_->dir() +
      "/cfg.toml --train.out_dir=" + dir + " --parallel.tp=2");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "fault injected (MEGASCALE_FAULT): nan (the local loss becomes NaN) at rank 1 step 2"))
      << r.output;
  size_t n = 0;
  for (size_t at = 0; (at = r.output.find("step 2: loss", at)) != std::string::npos; at++) n++;
  EXPECT_EQ(n, 2u) << "both ranks stop at the non-finite check:\n" << r.output;
  EXPECT_TRUE(contains(r.output, "is not finite; stopping before the update")) << r.output;
  EXPECT_FALSE(contains(r.output, "exit code 86")) << "no rank may be left waiting:\n" << r.output;
}

}  // namespace
}  // namespace ms
