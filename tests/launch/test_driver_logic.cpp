// test_driver_logic: the driver's pure pieces without processes: the detectors (anomaly.h) on given
// times, the self-check plan and judgment (selfcheck_plan.h), --hosts parsing and host launchers
// (host_launcher.h), and the control channel's messages and framing (heartbeat.h).
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "base/check.h"
#include "launch/anomaly.h"
#include "launch/heartbeat.h"
#include "launch/host_launcher.h"
#include "launch/job_summary.h"
#include "launch/selfcheck_plan.h"

namespace {

using namespace ms::launch;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(DriverAnomaly, ProgressLimitIsStartupThenFactorTimesMedianWithAFloor) {
  ProgressWatch w({/*factor=*/5, /*min_s=*/2, /*startup_s=*/10});
  const auto t0 = DriverClock::now();
  w.start(t0);
  EXPECT_FALSE(w.check(t0 + seconds(9)));
  ASSERT_TRUE(w.check(t0 + seconds(11)));
  EXPECT_NE(w.check(t0 + seconds(11))->find("after the start"), std::string::npos);
  // Steps of 1 s: the limit is 5 x 1 s.
  auto t = t0;
  for (int i = 0; i < 5; i++) w.progress(t += seconds(1), 1000.0);
  EXPECT_DOUBLE_EQ(w.limit_s(), 5.0);
  EXPECT_FALSE(w.check(t + milliseconds(4900)));
  EXPECT_TRUE(w.check(t + milliseconds(5100)));
  // Fast steps: the floor.
  for (int i = 0; i < 50; i++) w.progress(t += milliseconds(10), 10.0);
  EXPECT_DOUBLE_EQ(w.limit_s(), 2.0);
  // A new attempt: start-up limit again, the step times kept.
  w.start(t);
  EXPECT_DOUBLE_EQ(w.limit_s(), 10.0);
  EXPECT_DOUBLE_EQ(w.median_step_ms(), 10.0);
}

TEST(DriverAnomaly, TrafficJudgedOnlyAfterTheFirstStep) {
  TrafficWatch w(3);
  const auto t0 = DriverClock::now();
  w.start(t0);
  w.add(t0 + seconds(1), 0, false);
  EXPECT_FALSE(w.check(t0 + seconds(100)));  // not judged yet
  w.add(t0 + seconds(2), 0, true);           // judged from now
  EXPECT_FALSE(w.check(t0 + seconds(4)));
  w.add(t0 + seconds(4), 1024, true);
  EXPECT_FALSE(w.check(t0 + seconds(6)));
  ASSERT_TRUE(w.check(t0 + seconds(8)));
  EXPECT_NE(w.check(t0 + seconds(8))->find("no collective or p2p traffic"), std::string::npos);
}

TEST(DriverAnomaly, LossSpikeAndNonFiniteLoss) {
  LossWatch w(10, 6);
  // A noisy but steady loss: no spike.
  for (int s = 1; s <= 30; s++) EXPECT_FALSE(w.add(s, 3.0 + 0.01 * ((s * 7) % 5 - 2), true)) << s;
  // 3.0 + 1.0 is ~70 standard deviations (0.014) above the mean.
  auto spike = w.add(31, 4.0, true);
  ASSERT_TRUE(spike);
  EXPECT_NE(spike->find("loss spike at step 31"), std::string::npos) << *spike;
  EXPECT_TRUE(w.add(32, NAN, true));
  EXPECT_TRUE(w.add(33, 3.0, false));
  // z_limit 0: spikes not judged, non-finite still are.
  LossWatch off(5, 0);
  for (int s = 1; s <= 10; s++) off.add(s, 3.0, true);
  EXPECT_FALSE(off.add(11, 300.0, true));
  EXPECT_TRUE(off.add(12, INFINITY, true));
}

TEST(DriverSelfCheckPlan, NeighbourRoundsAreDisjointRingPairs) {
  EXPECT_TRUE(neighbour_rounds({0}).empty());
  auto two = neighbour_rounds({0, 1});
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0], (std::vector<std::pair<int, int>>{{0, 1}}));
  for (int n : {3, 4, 5, 8}) {
    std::vector<int> hosts;
    for (int i = 0; i < n; i++) hosts.push_back(10 + i);
    std::set<std::pair<int, int>> all;
    for (const auto& round : neighbour_rounds(hosts)) {
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        EXPECT_TRUE(busy.insert(a).second && busy.insert(b).second) << "a host twice in a round, n=" << n;
        all.insert({a, b});
      }
    }
    EXPECT_EQ(all.size(), (size_t)n) << "every ring edge once";
    for (int i = 0; i < n; i++) EXPECT_TRUE(all.count({10 + i, 10 + (i + 1) % n})) << i;
  }
}

HostCheck good(int host, double gflops = 100) {
  HostCheck c;
  c.host = host, c.ran = true, c.gemm_ok = true, c.gemm_gflops = gflops, c.allreduce_ok = true;
  return c;
}

TEST(DriverSelfCheckPlan, JudgmentNamesTheBadHostOnly) {
  // Host 1's all-reduce is wrong; its pairs fail; its neighbours pass their other pair.
  std::vector<HostCheck> c = {good(0), good(1), good(2)};
  c[1].allreduce_ok = false;
  c[1].detail = "expected 3, got 4";
  c[0].pairs = {{1, false}, {2, true}};
  c[1].pairs = {{0, false}, {2, false}};
  c[2].pairs = {{1, false}, {0, true}};
  auto v = judge_selfchecks(c, 0.5);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_TRUE(v[0].ok);
  EXPECT_FALSE(v[1].ok);
  EXPECT_NE(v[1].why.find("expected 3, got 4"), std::string::npos) << v[1].why;
  EXPECT_TRUE(v[2].ok);
  // Two hosts: the good one is not blamed for the pair its bad partner broke.
  std::vector<HostCheck> two = {good(0), good(1)};
  two[1].allreduce_ok = false;
  two[0].pairs = {{1, false}};
  two[1].pairs = {{0, false}};
  v = judge_selfchecks(two, 0.5);
  EXPECT_TRUE(v[0].ok);
  EXPECT_FALSE(v[1].ok);
  // A slow GEMM, a wrong GEMM, no report, a pair failing against good partners.
  std::vector<HostCheck> four = {good(0, 100), good(1, 30), good(2), good(3), good(4, 100)};
  four[2].gemm_ok = false;
  four[3].ran = false;
  v = judge_selfchecks(four, 0.5);
  EXPECT_TRUE(v[0].ok);
  EXPECT_FALSE(v[1].ok);
  EXPECT_NE(v[1].why.find("below 50%"), std::string::npos) << v[1].why;
  EXPECT_FALSE(v[2].ok);
  EXPECT_FALSE(v[3].ok);
  // Of two hosts neither fails on speed (which one is slow?); a slow all-reduce among 3 does.
  std::vector<HostCheck> pair_speed = {good(0, 100), good(1, 20)};
  v = judge_selfchecks(pair_speed, 0.5);
  EXPECT_TRUE(v[0].ok && v[1].ok);
  std::vector<HostCheck> bw = {good(0), good(1), good(2)};
  bw[0].allreduce_gbps = 1.0, bw[1].allreduce_gbps = 0.3, bw[2].allreduce_gbps = 0.9;
  v = judge_selfchecks(bw, 0.5);
  EXPECT_TRUE(v[0].ok);
  EXPECT_FALSE(v[1].ok);
  EXPECT_NE(v[1].why.find("GB/s"), std::string::npos) << v[1].why;
  EXPECT_TRUE(v[2].ok);
  // A host of one process measures no bandwidth (0): never judged on it, nor counted in the median
  // (lower_median drops it; counted, the median of 0, 0.3, 0.9, 1.0 would be 0.3 and the slow host pass).
  std::vector<HostCheck> bw0 = {good(0), good(1), good(2), good(3)};
  bw0[0].allreduce_gbps = 0, bw0[1].allreduce_gbps = 1.0, bw0[2].allreduce_gbps = 0.3, bw0[3].allreduce_gbps = 0.9;
  v = judge_selfchecks(bw0, 0.5);
  EXPECT_TRUE(v[0].ok && v[1].ok && v[3].ok);
  EXPECT_FALSE(v[2].ok);
  std::vector<HostCheck> link = {good(0), good(1), good(2)};
  link[1].pairs = {{0, false}, {2, false}};
  link[0].pairs = {{1, false}, {2, true}};
  link[2].pairs = {{1, false}, {0, true}};
  v = judge_selfchecks(link, 0.5);
  EXPECT_TRUE(v[0].ok);
  EXPECT_FALSE(v[1].ok);
  EXPECT_TRUE(v[2].ok);
}

TEST(DriverHosts, ParseAndLaunchers) {
  auto h = parse_hosts("localhost*3,node7");
  ASSERT_EQ(h.size(), 4u);
  EXPECT_TRUE(h[0].local && h[2].local);
  EXPECT_EQ(h[2].index, 2);
  EXPECT_EQ(h[0].address, "127.0.0.1");
  EXPECT_FALSE(h[3].local);
  EXPECT_EQ(h[3].address, "node7");
  EXPECT_THROW(parse_hosts("a,,b"), ms::Error);
  EXPECT_THROW(parse_hosts("a*0"), ms::Error);
  EXPECT_THROW(parse_hosts("*2"), ms::Error);
  const std::vector<std::string> argv = {"/bin/megascale", "executor"};
  EXPECT_EQ(make_host_launcher("local")->wrap(h[0], argv), argv);
  EXPECT_THROW(make_host_launcher("local")->wrap(h[3], argv), ms::Error);
  EXPECT_EQ(make_host_launcher("ssh -o BatchMode=yes {host}")->wrap(h[3], argv),
            (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "node7", "/bin/megascale", "executor"}));
  EXPECT_EQ(make_host_launcher("ip netns exec {host}")->wrap(h[0], argv), argv);  // local hosts run as is
  EXPECT_THROW(make_host_launcher("ssh"), ms::Error);
}

TEST(DriverChannel, MessagesRoundTripAndFraming) {
  HostBeat b;
  b.host = 2, b.seq = 7, b.attempt = 1, b.state = "running", b.bytes_sent = 123;
  RankBeat r;
  r.rank = 5, r.pid = 99, r.state = "killed", r.signal = 9, r.step = 4, r.loss = NAN, r.ms = {{"forward", 1.5}};
  b.ranks.push_back(r);
  b.steps.push_back({5, 4, 2.5, 12.0});
  b.lines.push_back({5, "error", "boom"});
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
  ASSERT_TRUE(send_message(fds[1], b));
  RunCommand c;
  c.attempt = 3, c.world = 4, c.ranks = {2, 3}, c.argv = {"x"}, c.env = {{"A", "b"}};
  ASSERT_TRUE(send_message(fds[1], c));
  ::close(fds[1]);
  LineReader rd;
  EXPECT_FALSE(rd.read_from(fds[0]));  // end of file after the data
  ::close(fds[0]);
  std::string line;
  ASSERT_TRUE(rd.next(line));
  const HostBeat back = parse_message(line, "test").get<HostBeat>();
  EXPECT_EQ(back.host, 2);
  EXPECT_EQ(back.seq, 7u);
  ASSERT_EQ(back.ranks.size(), 1u);
  EXPECT_EQ(back.ranks[0].signal, 9);
  EXPECT_TRUE(std::isnan(back.ranks[0].loss));  // NaN travels as null
  EXPECT_EQ(back.ranks[0].ms.at("forward"), 1.5);
  EXPECT_EQ(back.steps.at(0).step, 4);
  EXPECT_EQ(back.lines.at(0).text, "boom");
  ASSERT_TRUE(rd.next(line));
  const auto j = parse_message(line, "test");
  EXPECT_EQ(j["cmd"], "run");
  const RunCommand cb = j.get<RunCommand>();
  EXPECT_EQ(cb.ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(cb.env.at("A"), "b");
  EXPECT_FALSE(rd.next(line));
  EXPECT_THROW(parse_message("not json", "host 1"), ms::Error);
}

TEST(DriverSelfCheckPlan, HostResultsFromTheProcessesJson) {
  HostCheck c;
  c.host = 1;
  SelfCheckResult gemm, other, bad, none;
  gemm.exit_code = 0;
  gemm.result = {{"gemm_ok", true}, {"gemm_gflops", 120.0}, {"allreduce_ok", true}, {"allreduce_gbps", 0.5}};
  other.result = {{"gemm_ok", nullptr}, {"allreduce_ok", true}};
  add_host_results(c, {gemm, other});
  EXPECT_TRUE(c.ran && c.gemm_ok && c.allreduce_ok);
  EXPECT_EQ(c.gemm_gflops, 120.0);
  EXPECT_EQ(c.allreduce_gbps, 0.5);
  bad.result = {{"gemm_ok", nullptr}, {"allreduce_ok", false}, {"allreduce_error", "element 0 is 7, expected 6"}};
  HostCheck d;
  add_host_results(d, {gemm, bad});
  EXPECT_FALSE(d.allreduce_ok);
  EXPECT_EQ(d.detail, "element 0 is 7, expected 6");
  none.exit_code = 137;  // killed at the timeout: no result
  HostCheck e;
  add_host_results(e, {none});
  EXPECT_FALSE(e.allreduce_ok);
  EXPECT_NE(e.detail.find("exit code 137"), std::string::npos);
  EXPECT_FALSE(result_passed_allreduce(bad));
  EXPECT_FALSE(result_passed_allreduce(none));
  EXPECT_TRUE(result_passed_allreduce(other));
  SelfCheckResult not_run;
  not_run.result = {{"allreduce_ok", nullptr}};
  EXPECT_FALSE(result_passed_allreduce(not_run));
}

// ETTR counts each step once, at its latest execution; rolled-back executions are lost time.
TEST(DriverSummary, EttrCountsEachStepsLatestExecution) {
  StepTimes t;
  for (int s = 1; s <= 6; s++) t.add(s, 0, 100.0);  // attempt 0 reached step 6
  t.add(3, 0, 150.0);                                // a slower rank's report of step 3: the max
  for (int s = 5; s <= 8; s++) t.add(s, 1, 200.0);   // attempt 1 resumed from the step-4 checkpoint
  t.add(0, 1, 0.0);                                  // no time: ignored
  EXPECT_EQ(t.steps(), 8u);
  EXPECT_DOUBLE_EQ(t.productive_s(), (4 * 100.0 + 50.0 + 4 * 200.0) / 1000.0);
  JobSummary sum;
  sum.wall_s = 2.5;
  sum.productive_s = t.productive_s();
  sum.faults.push_back({"crash", "rank 2 killed by signal 9 (Killed)", 2, 1, 6});
  sum.restarts = 1, sum.steps_repeated = 2;
  EXPECT_DOUBLE_EQ(sum.ettr(), 1.25 / 2.5);
  const auto lines = sum.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("1 fault(s), 1 restart(s), 2 step(s) repeated"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("ETTR 0.50"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("rank 2 killed by signal 9 (Killed) at step 6"), std::string::npos) << lines[1];
  EXPECT_DOUBLE_EQ(sum.to_json()["ettr"].get<double>(), 0.5);
  EXPECT_EQ(JobSummary{}.ettr(), 0.0);
}

}  // namespace
