// test_recovery_policy: the driver's recovery policy (recovery_policy.h RecoveryPolicy) fed event
// sequences the way the driver feeds it, without processes. Each expectation follows a rule written
// in driver.h / docs/reliability.md "Recovery": an excluded host is replaced by a spare; without a
// spare the job shrinks to the healthy hosts; the same failure `same_failure_limit` times in a row,
// `max_restarts` restarts, or every rank failing at start-up ends the job; a culprit stuck in a
// checkpoint segment is storage and excludes nobody; a loss spike is a fault only with
// --loss-spike-action restart. Also the flags parsed once (store_spec.h, parse_loss_spike_action)
// and the self-check command taken from the application.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/check.h"
#include "launch/recovery_policy.h"
#include "launch/selfcheck_plan.h"
#include "launch/store_spec.h"

namespace {

using namespace ms::launch;
using Next = StopDecision::Next;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

PolicyOptions hosts(int n, int spares) {
  PolicyOptions o;
  for (int i = 0; i < n; i++) o.host_names.push_back(std::string(1, (char)('a' + i)));
  o.spare_hosts = spares;
  return o;
}

RankBeat exited(int rank, int code) {
  RankBeat r;
  r.rank = rank, r.state = "exited", r.exit_code = code;
  return r;
}

// A view of a running attempt of `world` ranks where `failed` ended, at `now_s`.
RunningView running(double now_s, int world, int job_step, std::vector<FailedRank> failed = {},
                    std::vector<std::pair<int, double>> ages = {}) {
  RunningView v;
  v.now_s = now_s, v.world = world, v.job_step = job_step;
  v.ended = (int)failed.size();
  v.failed = std::move(failed);
  v.beat_ages = std::move(ages);
  return v;
}

// A crash of `rank` on `host` detected at `step`, through stop and (no) self-checks.
StopDecision crash_and_stop(RecoveryPolicy& p, int host, int rank, int step, int world) {
  // One rank failed of `world`: judged once its peers' failures had 500 ms to come in.
  EXPECT_EQ(p.judge_running(running(100, world, step, {{host, exited(rank, 1)}}), 10).next,
            RunningVerdict::Next::kContinue);
  const RunningVerdict r = p.judge_running(running(100.6, world, step, {{host, exited(rank, 1)}}), 10);
  EXPECT_EQ(r.next, RunningVerdict::Next::kFault);
  EXPECT_TRUE(p.on_fault(r.fault, step).empty());  // a crash excludes nobody by itself
  EXPECT_FALSE(p.wants_hang_dumps()) << "a rank that died names its culprit: SIGKILL, no dumps";
  EXPECT_FALSE(p.ranks_stopped(step));
  return p.after_stop();
}

// A rank killed by a signal is the root cause whatever follows: judged at once, not after the 500 ms
// its peers' failures get when it exits with an error (recovery in seconds, issue 37).
TEST(RecoveryPolicy, ARankKilledByASignalIsJudgedAtOnce) {
  RecoveryPolicy p(hosts(2, 0));
  p.next_attempt({0, 1});
  RankBeat killed;
  killed.rank = 2, killed.state = "killed", killed.signal = 9;
  const RunningVerdict r = p.judge_running(running(10.0, 4, 7, {{1, killed}}), 10);
  ASSERT_EQ(r.next, RunningVerdict::Next::kFault);
  EXPECT_EQ(r.fault.rank, 2);
  EXPECT_TRUE(has(r.fault.reason, "rank 2 killed by signal 9")) << r.fault.reason;
  // An error exit still waits for its peers (the comm failures that follow it).
  RecoveryPolicy q(hosts(2, 0));
  q.next_attempt({0, 1});
  EXPECT_EQ(q.judge_running(running(10.0, 4, 7, {{1, exited(2, 1)}}), 10).next, RunningVerdict::Next::kContinue);
}

TEST(RecoveryPolicy, ACrashThenAFailedSelfCheckExcludesTheHostAndASpareTakesItsPlace) {
  RecoveryPolicy p(hosts(3, 1));  // hosts 0, 1 run; host 2 waits as a spare
  AttemptDecision a = p.next_attempt({0, 1, 2});
  EXPECT_EQ(a.hosts, (std::vector<int>{0, 1}));
  EXPECT_FALSE(a.shrunk);
  EXPECT_TRUE(p.active(1));
  EXPECT_FALSE(p.active(2));
  // Rank 3 (host 1) exits with an error; its peers may fail right after it: not judged yet.
  RunningVerdict r = p.judge_running(running(10.0, 4, 7, {{1, exited(3, 1)}}), 10);
  EXPECT_EQ(r.next, RunningVerdict::Next::kContinue);
  r = p.judge_running(running(10.6, 4, 7, {{1, exited(3, 1)}}), 10);
  ASSERT_EQ(r.next, RunningVerdict::Next::kFault);
  EXPECT_EQ(r.fault.kind, "crash");
  EXPECT_EQ(r.fault.host, 1);
  EXPECT_TRUE(has(r.fault.reason, "rank 3 exited with code 1")) << r.fault.reason;
  EXPECT_TRUE(p.on_fault(r.fault, 7).empty());
  EXPECT_FALSE(p.ranks_stopped(8));
  EXPECT_EQ(p.faults().back().step, 8);  // the step the job had reached
  EXPECT_EQ(p.after_stop().next, Next::kSelfCheck);
  // Host 1's self-check fails while the others pass: host 1 is excluded.
  const Blame b = p.selfchecks_judged({{0, true, "", ""}, {1, false, "GEMM check: wrong result", "wrong"}, {2, true, "", ""}});
  ASSERT_EQ(b.exclude.size(), 1u);
  EXPECT_EQ(b.exclude[0].first, 1);
  EXPECT_TRUE(p.excluded(1));
  EXPECT_TRUE(has(p.excluded_reason(1), "self-check: GEMM check: wrong result")) << p.excluded_reason(1);
  p.restart();
  EXPECT_EQ(p.attempt(), 1);
  EXPECT_EQ(p.restarts(), 1);
  // The spare takes its place; the world keeps its size.
  a = p.next_attempt({0, 1, 2});
  EXPECT_EQ(a.hosts, (std::vector<int>{0, 2}));
  EXPECT_FALSE(a.shrunk);
}

TEST(RecoveryPolicy, ASilentHostIsExcludedAtOnceAndWithoutASpareTheJobShrinks) {
  PolicyOptions o = hosts(3, 0);
  o.selfcheck = false;
  RecoveryPolicy p(o);
  EXPECT_EQ(p.next_attempt({0, 1, 2}).hosts, (std::vector<int>{0, 1, 2}));
  const RunningVerdict r = p.judge_running(running(50, 3, 4, {}, {{0, 0.5}, {1, 12.0}, {2, 0.4}}), 10);
  ASSERT_EQ(r.next, RunningVerdict::Next::kFault);
  EXPECT_EQ(r.fault.kind, "heartbeat");
  EXPECT_EQ(r.fault.host, 1);
  EXPECT_TRUE(has(r.fault.reason, "no heartbeat for 12.0 s from host 1 (b)")) << r.fault.reason;
  const std::vector<Exclusion> out = p.on_fault(r.fault, 4);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].host, 1);
  EXPECT_EQ(p.excluded_reason(1), r.fault.reason);
  p.ranks_stopped(4);
  EXPECT_EQ(p.after_stop().next, Next::kRestart);  // --no-selfcheck
  p.restart();
  // No spare: the two healthy hosts carry on (shrink, logged once).
  AttemptDecision a = p.next_attempt({0, 1, 2});
  EXPECT_EQ(a.hosts, (std::vector<int>{0, 2}));
  EXPECT_TRUE(a.shrunk);
  EXPECT_TRUE(a.first_shrink);
  a = p.next_attempt({0, 2});
  EXPECT_TRUE(a.shrunk);
  EXPECT_FALSE(a.first_shrink);
}

TEST(RecoveryPolicy, EveryHostSilentAtOnceExcludesNobody) {
  RecoveryPolicy p(hosts(2, 0));
  p.next_attempt({0, 1});
  const RunningVerdict r = p.judge_running(running(50, 2, 4, {}, {{0, 30.0}, {1, 30.0}}), 10);
  ASSERT_EQ(r.next, RunningVerdict::Next::kFault);
  EXPECT_EQ(r.fault.kind, "heartbeat");
  EXPECT_EQ(r.fault.host, -1);
  EXPECT_TRUE(p.on_fault(r.fault, 4).empty());
  EXPECT_FALSE(p.excluded(0) || p.excluded(1));
}

TEST(RecoveryPolicy, TheSameFailureThreeTimesInARowEndsTheJob) {
  RecoveryPolicy p(hosts(2, 0));  // --same-failure-limit 3
  for (int i = 0; i < 2; i++) {
    p.next_attempt({0, 1});
    EXPECT_EQ(crash_and_stop(p, 1, 1, 5, 2).next, Next::kSelfCheck) << i;
    p.selfchecks_judged({{0, true, "", ""}, {1, true, "", ""}});
    p.restart();
  }
  p.next_attempt({0, 1});
  const StopDecision d = crash_and_stop(p, 1, 1, 5, 2);
  ASSERT_EQ(d.next, Next::kEnd);
  EXPECT_TRUE(has(d.reason, "3 failures in a row without getting past step 5")) << d.reason;
  EXPECT_TRUE(has(d.reason, "rank 1 exited with code 1")) << d.reason;
}

TEST(RecoveryPolicy, GettingPastTheLastFailureIsNotTheSameFailure) {
  RecoveryPolicy p(hosts(2, 0));
  for (int step : {5, 9, 14, 20}) {  // every attempt gets further
    p.next_attempt({0, 1});
    EXPECT_NE(crash_and_stop(p, 0, 0, step, 2).next, Next::kEnd) << step;
    p.restart();
  }
}

TEST(RecoveryPolicy, MaxRestartsEndsTheJob) {
  PolicyOptions o = hosts(2, 0);
  o.max_restarts = 2;
  o.selfcheck = false;
  RecoveryPolicy p(o);
  for (int step : {5, 9}) {
    p.next_attempt({0, 1});
    EXPECT_EQ(crash_and_stop(p, 0, 0, step, 2).next, Next::kRestart);
    p.restart();
  }
  p.next_attempt({0, 1});
  const StopDecision d = crash_and_stop(p, 0, 0, 14, 2);
  ASSERT_EQ(d.next, Next::kEnd);
  EXPECT_TRUE(has(d.reason, "2 restarts (--max-restarts)")) << d.reason;
}

TEST(RecoveryPolicy, EveryRankFailingAtStartUpIsNotRetried) {
  RecoveryPolicy p(hosts(2, 0));
  p.next_attempt({0, 1});
  const RunningVerdict r = p.judge_running(running(3, 2, 0, {{0, exited(0, 1)}, {1, exited(1, 1)}}), 10);
  ASSERT_EQ(r.next, RunningVerdict::Next::kFault);  // every rank ended: judged at once
  p.on_fault(r.fault, 0);
  p.ranks_stopped(0);
  const StopDecision d = p.after_stop();
  ASSERT_EQ(d.next, Next::kEnd);
  EXPECT_TRUE(has(d.reason, "is not retried")) << d.reason;
  // A communication failure (exit 86) is the consequence of a peer's death, not bad input.
  RecoveryPolicy q(hosts(2, 0));
  q.next_attempt({0, 1});
  q.on_fault(q.judge_running(running(3, 2, 0, {{0, exited(0, 86)}, {1, exited(1, 86)}}), 10).fault, 0);
  q.ranks_stopped(0);
  EXPECT_NE(q.after_stop().next, Next::kEnd);
}

TEST(RecoveryPolicy, AHangStuckInACheckpointSegmentExcludesNobody) {
  RecoveryPolicy p(hosts(3, 0));
  p.next_attempt({0, 1, 2});
  RunningView v = running(400, 3, 12);
  v.stalled = "no step completed for 31.0 s";
  const RunningVerdict r = p.judge_running(v, 10);
  ASSERT_EQ(r.next, RunningVerdict::Next::kFault);
  EXPECT_EQ(r.fault.kind, "hang");
  EXPECT_TRUE(p.on_fault(r.fault, 12).empty());
  EXPECT_TRUE(p.wants_hang_dumps());  // SIGUSR1: where each rank waits
  EXPECT_TRUE(p.ranks_stopped(12));  // a hang: the diagnosis is wanted
  const Blame b = p.hang_diagnosed({{1, 0, "never entered all_reduce on 'dp' seq 41", "checkpoint-stage1"}});
  EXPECT_EQ(b.cause, "storage");
  EXPECT_TRUE(b.exclude.empty());
  EXPECT_EQ(p.faults().back().kind, "storage");
  for (int h = 0; h < 3; h++) EXPECT_FALSE(p.excluded(h));
  EXPECT_EQ(p.after_stop().next, Next::kSelfCheck);
  // The same hang in a compute segment is its host's.
  RecoveryPolicy q(hosts(3, 0));
  q.next_attempt({0, 1, 2});
  q.on_fault(q.judge_running(v, 10).fault, 12);
  q.ranks_stopped(12);
  EXPECT_EQ(q.hang_diagnosed({{1, 0, "never entered all_reduce", "forward"}}).exclude.size(), 1u);
  EXPECT_TRUE(q.excluded(0));
}

TEST(RecoveryPolicy, ALossSpikeIsAFaultOnlyWithRestart) {
  PolicyOptions o = hosts(1, 0);
  EXPECT_FALSE(RecoveryPolicy(o).loss_spike("loss 9.1 at step 40: z 7.2", 0, 0));  // warn: logged only
  o.loss_spike_action = LossSpikeAction::kRestart;
  const auto f = RecoveryPolicy(o).loss_spike("loss 9.1 at step 40: z 7.2", 0, 0);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->kind, "loss-spike");
  EXPECT_EQ(f->reason, "loss 9.1 at step 40: z 7.2");
  EXPECT_EQ(parse_loss_spike_action("warn"), LossSpikeAction::kWarn);
  EXPECT_EQ(parse_loss_spike_action("restart"), LossSpikeAction::kRestart);
  try {
    parse_loss_spike_action("stop");
    FAIL() << "no error";
  } catch (const ms::Error& e) {
    EXPECT_TRUE(has(e.what(), "--loss-spike-action")) << e.what();
    EXPECT_TRUE(has(e.what(), "'stop'")) << e.what();
  }
}

TEST(RecoveryPolicy, AJobEndsWhenEveryRankExitsZeroAndWithNoHealthyHostLeft) {
  RecoveryPolicy p(hosts(2, 0));
  p.next_attempt({0, 1});
  RunningView v = running(9, 2, 30);
  v.ended = v.ok = 2;
  EXPECT_EQ(p.judge_running(v, 10).next, RunningVerdict::Next::kDone);
  EXPECT_TRUE(p.exclude(0, "its executor could not start"));
  EXPECT_FALSE(p.exclude(0, "again"));  // once
  EXPECT_EQ(p.excluded_reason(0), "its executor could not start");
  const AttemptDecision a = p.next_attempt({0});
  EXPECT_TRUE(a.end);
  EXPECT_EQ(a.reason, "no healthy host left");
}

TEST(RecoveryPolicy, AHostSilentWhileItsRanksStopIsExcludedOnce) {
  RecoveryPolicy p(hosts(2, 0));
  p.next_attempt({0, 1});
  auto out = p.silent_while_stopping({{0, 1.0}, {1, 11.0}}, 10);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].host, 1);
  EXPECT_TRUE(has(out[0].reason, "no heartbeat for 11.0 s while its ranks were stopped")) << out[0].reason;
  EXPECT_TRUE(p.silent_while_stopping({{1, 12.0}}, 10).empty());
}

TEST(LaunchFlags, StoreIsParsedOnce) {
  EXPECT_EQ(parse_store_spec("auto").kind, StoreKind::kAuto);
  EXPECT_EQ(parse_store_spec("file").kind, StoreKind::kFile);
  EXPECT_EQ(parse_store_spec("redis").kind, StoreKind::kRedis);
  const StoreSpec at = parse_store_spec("redis://10.0.0.5:6379");
  EXPECT_EQ(at.kind, StoreKind::kRedisAt);
  EXPECT_EQ(at.name(), "redis://10.0.0.5:6379");
  EXPECT_EQ(resolve_store(StoreSpec{}, true).kind, StoreKind::kFile);
  EXPECT_EQ(resolve_store(StoreSpec{}, false).kind, StoreKind::kRedis);
  EXPECT_EQ(resolve_store(at, true).name(), at.name());
  try {
    parse_store_spec("etcd");
    FAIL() << "no error";
  } catch (const ms::Error& e) {
    EXPECT_TRUE(has(e.what(), "--store")) << e.what();
    EXPECT_TRUE(has(e.what(), "unknown store 'etcd'")) << e.what();
  }
}

TEST(LaunchFlags, TheSelfCheckCommandIsTheApplications) {
  const SelfCheckSetup s{{"/opt/app/bin/tool", "host-check"}, "gloo", 60};
  const SelfCheckCommand c = selfcheck_command(s, 7, {}, 0, 1, 1, true);
  ASSERT_EQ(c.procs.size(), 1u);
  const std::vector<std::string>& argv = c.procs[0].argv;
  ASSERT_GE(argv.size(), 3u);
  EXPECT_EQ(argv[0], "/opt/app/bin/tool");
  EXPECT_EQ(argv[1], "host-check");
  EXPECT_EQ(argv[2], "--collective");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--gemm"), argv.end());
  // A pair round: no GEMM, a short all-reduce (the link's correctness, not its bandwidth).
  const std::vector<std::string> pair = selfcheck_command(s, 8, {}, 1, 1, 2, false).procs.at(0).argv;
  EXPECT_EQ(std::find(pair.begin(), pair.end(), "--gemm"), pair.end());
  const auto iters = std::find(pair.begin(), pair.end(), "--iters");
  ASSERT_NE(iters, pair.end());
  EXPECT_EQ(*(iters + 1), "2");
}

}  // namespace
