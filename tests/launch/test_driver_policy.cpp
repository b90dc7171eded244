// test_driver_policy: the driver's recovery decisions (recovery_policy.h) on event sequences without
// training processes: a shared failure (every host failing the same way, a culprit stuck in a
// checkpoint segment, every host silent at once) excludes nobody; a self-check that could not run is
// "not run", never "wrong"; the loop clock does not count the driver's own absence; the retry
// limits. Then the pieces that keep the driver from blocking or losing its store: the bounded output
// queue (output_queue.h) on a pipe nobody reads, and the store watch (job_store.h heal) after the
// redis-server is killed.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "base/check.h"
#include "base/redis_ping.h"
#include "common/test_util.h"
#include "launch/anomaly.h"
#include "launch/janitor.h"
#include "launch/job_store.h"
#include "launch/output_queue.h"
#include "launch/recovery_policy.h"
#include "launch/selfcheck_plan.h"

namespace {

using namespace ms::launch;
using std::chrono::milliseconds;
using std::chrono::seconds;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- hangs -------------------------------------------------------------------------------------

TEST(DriverPolicy, ACulpritStuckInACheckpointSegmentIsAStorageFault) {
  // The full-disk case: rank 1 (host 0) never reaches the collective; its dump says checkpoint-stage1.
  const HangCulprit stuck{1, 0, "never entered all_reduce on 'dp' seq 41 (no op there in its dump)",
                          "checkpoint-stage1"};
  Blame b = blame_hang({stuck}, {0, 1, 2});
  EXPECT_EQ(b.cause, "storage");
  EXPECT_TRUE(b.exclude.empty());
  EXPECT_TRUE(has(b.note, "storage")) << b.note;
  EXPECT_TRUE(has(b.note, "checkpoint-stage1")) << b.note;
  // The same from the diagnosis' words alone (no segment read from a dump).
  const HangCulprit words{
      1, 0, "never entered all_reduce on 'dp' seq 41 (no op; its current segment: checkpoint-stage1-wait)", ""};
  b = blame_hang({words}, {0, 1});
  EXPECT_EQ(b.cause, "storage");
  EXPECT_TRUE(b.exclude.empty());
  // A frozen process (SIGSTOP) is its host's even in a checkpoint segment.
  const HangCulprit frozen{1, 0, "its process was not scheduled for 5.0 s (stopped or starved) while the others waited",
                           "checkpoint-stage1"};
  b = blame_hang({frozen}, {0, 1});
  EXPECT_EQ(b.cause, "host");
  EXPECT_EQ(b.exclude.size(), 1u);
  // A culprit in a compute segment is its host's fault.
  const HangCulprit compute{1, 0, "its process was not scheduled for 5.0 s", "forward"};
  b = blame_hang({compute}, {0, 1, 2});
  EXPECT_EQ(b.cause, "host");
  ASSERT_EQ(b.exclude.size(), 1u);
  EXPECT_EQ(b.exclude[0].first, 0);
  EXPECT_TRUE(has(b.exclude[0].second, "rank 1")) << b.exclude[0].second;
  // No culprit: nobody.
  b = blame_hang({}, {0, 1});
  EXPECT_EQ(b.cause, "none");
  EXPECT_TRUE(b.exclude.empty());
}

TEST(DriverPolicy, CulpritsOnEveryHostAreASharedCause) {
  const std::vector<HangCulprit> both = {{1, 0, "left no dump", ""}, {3, 1, "left no dump", ""}};
  Blame b = blame_hang(both, {0, 1});
  EXPECT_EQ(b.cause, "shared");
  EXPECT_TRUE(b.exclude.empty());
  EXPECT_TRUE(has(b.note, "every host")) << b.note;
  // Two of three hosts: those two.
  b = blame_hang(both, {0, 1, 2});
  EXPECT_EQ(b.cause, "host");
  EXPECT_EQ(b.exclude.size(), 2u);
  // One host in all (no spare, no other): its culprit is still its fault.
  b = blame_hang({{1, 0, "left no dump", ""}}, {0});
  EXPECT_EQ(b.exclude.size(), 1u);
}

// ---- self-checks -------------------------------------------------------------------------------

// What `megascale selfcheck --gemm --collective` writes when it cannot rendezvous (train/selfcheck.cpp).
SelfCheckResult could_not_rendezvous() {
  SelfCheckResult r;
  r.exit_code = 1;
  r.result = {{"gemm_ok", false}, {"gemm_gflops", nullptr}, {"gemm_error", "not run: rendezvous timed out"},
              {"allreduce_ok", false}, {"allreduce_error", "not run: rendezvous timed out"},
              {"error", "rendezvous timed out"}};
  return r;
}

TEST(DriverPolicy, ACheckThatCouldNotRunIsNotRunNeverWrong) {
  HostCheck c;
  c.host = 0;
  add_host_results(c, {could_not_rendezvous(), could_not_rendezvous()});
  EXPECT_TRUE(c.not_run);
  HostCheck ok;
  ok.host = 1;
  SelfCheckResult pass;
  pass.exit_code = 0;
  pass.result = {{"gemm_ok", true}, {"gemm_gflops", 50.0}, {"allreduce_ok", true}, {"allreduce_gbps", 1.0}};
  add_host_results(ok, {pass});
  EXPECT_FALSE(ok.not_run);
  const auto v = judge_selfchecks({c, ok}, 0.5);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FALSE(v[0].ok);
  EXPECT_EQ(v[0].kind, "not run");
  EXPECT_FALSE(has(v[0].why, "wrong")) << v[0].why;
  EXPECT_TRUE(has(v[0].why, "rendezvous timed out")) << v[0].why;
  EXPECT_TRUE(v[1].ok);
  EXPECT_EQ(v[1].kind, "");
  // A process killed at the time limit wrote nothing: not run either.
  HostCheck killed;
  SelfCheckResult none;
  none.exit_code = 137;
  add_host_results(killed, {none});
  EXPECT_TRUE(killed.not_run);
  // A wrong all-reduce sum is wrong.
  HostCheck wrong;
  SelfCheckResult bad;
  bad.result = {{"gemm_ok", nullptr}, {"allreduce_ok", false}, {"allreduce_error", "element 0 is 7, expected 6"}};
  add_host_results(wrong, {pass, bad});
  EXPECT_FALSE(wrong.not_run);
  wrong.host = 2;
  EXPECT_EQ(judge_selfchecks({wrong}, 0.5)[0].kind, "wrong");
}

TEST(DriverPolicy, EveryHostFailingTheSameWayExcludesNobody) {
  // The dead store: no host's checks could rendezvous.
  std::vector<HostCheck> all(3);
  for (int i = 0; i < 3; i++) all[(size_t)i].host = i, add_host_results(all[(size_t)i], {could_not_rendezvous()});
  Blame b = blame_selfchecks(judge_selfchecks(all, 0.5));
  EXPECT_EQ(b.cause, "shared");
  EXPECT_TRUE(b.exclude.empty());
  EXPECT_TRUE(has(b.note, "not run")) << b.note;
  // One host of one whose checks could not run: shared too (nothing says it is the host).
  b = blame_selfchecks({{0, false, "self-check not run: rendezvous timed out", "not run"}});
  EXPECT_TRUE(b.exclude.empty());
  // Every host reporting a wrong result: the same software everywhere, not every machine broken.
  const HostVerdict wrong0{0, false, "GEMM check: wrong result", "wrong"};
  b = blame_selfchecks({wrong0, {1, false, "GEMM check: wrong result", "wrong"}});
  EXPECT_EQ(b.cause, "shared");
  EXPECT_TRUE(b.exclude.empty());
  // One host failing while others pass: that host.
  b = blame_selfchecks({{0, true, "", ""}, {1, false, "self-check not run: x", "not run"}, {2, true, "", ""}});
  EXPECT_EQ(b.cause, "host");
  ASSERT_EQ(b.exclude.size(), 1u);
  EXPECT_EQ(b.exclude[0].first, 1);
  EXPECT_TRUE(has(b.exclude[0].second, "self-check: ")) << b.exclude[0].second;
  // Every host failing, but in different ways: each one.
  b = blame_selfchecks({wrong0, {1, false, "self-check not run: x", "not run"}});
  EXPECT_EQ(b.exclude.size(), 2u);
  // A lone host with a wrong result is excluded.
  b = blame_selfchecks({{0, false, "GEMM check: wrong result", "wrong"}});
  EXPECT_EQ(b.exclude.size(), 1u);
  // Nothing failed.
  EXPECT_EQ(blame_selfchecks({{0, true, "", ""}, {1, true, "", ""}}).cause, "none");
}

// ---- heartbeats and the driver's own clock ------------------------------------------------------

TEST(DriverPolicy, EveryHostSilentAtOnceIsShared) {
  Blame b = blame_heartbeats({{0, 53.9}, {1, 53.8}}, 10);
  EXPECT_EQ(b.cause, "shared");
  EXPECT_TRUE(b.exclude.empty());
  b = blame_heartbeats({{0, 0.3}, {1, 12.0}, {2, 0.2}}, 10);
  EXPECT_EQ(b.cause, "host");
  ASSERT_EQ(b.exclude.size(), 1u);
  EXPECT_EQ(b.exclude[0].first, 1);
  EXPECT_TRUE(has(b.exclude[0].second, "no heartbeat for 12.0 s")) << b.exclude[0].second;
  // A single host that goes silent is blamed (there is nothing to compare it with).
  EXPECT_EQ(blame_heartbeats({{0, 11.0}}, 10).exclude.size(), 1u);
  EXPECT_EQ(blame_heartbeats({{0, 1.0}, {1, 2.0}}, 10).cause, "none");
}

TEST(DriverPolicy, TheLoopClockDoesNotCountTheDriversAbsence) {
  LoopClock clock(seconds(1));
  const auto t0 = DriverClock::now();
  auto t = t0;
  clock.tick(t);
  for (int i = 0; i < 10; i++) clock.tick(t += milliseconds(100));
  EXPECT_EQ(clock.now(), t0 + milliseconds(1000));  // ordinary wake-ups count in full
  // A beat read now; then the driver is stopped for 75 s (SIGSTOP) and wakes up.
  const auto last_beat = clock.now();
  ProgressWatch progress({10, 4, 60});
  progress.start(clock.now());
  progress.progress(clock.now(), 100);
  clock.tick(t += seconds(75));
  EXPECT_EQ(clock.now() - last_beat, seconds(1));  // the gap counts as 1 s
  EXPECT_EQ(clock.skipped(), seconds(74));
  const double age = std::chrono::duration<double>(clock.now() - last_beat).count();
  EXPECT_EQ(blame_heartbeats({{0, age}, {1, age}}, 5).cause, "none");
  EXPECT_FALSE(progress.check(clock.now()));  // no false "no step completed"
  // Time goes on from there; a host that then stays silent is still found.
  for (int i = 0; i < 60; i++) clock.tick(t += milliseconds(100));
  EXPECT_EQ(clock.now() - last_beat, seconds(7));
  EXPECT_TRUE(progress.check(clock.now()));
  // Monotonic even if the real clock source steps back between ticks.
  const auto before = clock.now();
  clock.tick(t - seconds(3));
  EXPECT_GE(clock.now(), before);
}

// ---- failures, attempts, limits ----------------------------------------------------------------

TEST(DriverPolicy, RootCauseAndAttemptPlan) {
  RankBeat killed, error, comm;
  killed.rank = 2, killed.state = "killed", killed.signal = 9;
  error.rank = 1, error.state = "exited", error.exit_code = 1;
  comm.rank = 0, comm.state = "exited", comm.exit_code = 86;
  auto r = root_cause({{0, comm}, {0, error}, {1, killed}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank.rank, 2);
  r = root_cause({{0, comm}, {0, error}});
  EXPECT_EQ(r->rank.rank, 1);
  EXPECT_FALSE(root_cause({}));
  FaultRecord f = describe_rank_failure({1, killed}, "");
  EXPECT_EQ(f.kind, "crash");
  EXPECT_EQ(f.host, 1);
  EXPECT_TRUE(has(f.reason, "rank 2 killed by signal 9")) << f.reason;
  f = describe_rank_failure({0, error}, "loss nan at step 7 is not finite");
  EXPECT_EQ(f.kind, "nan");
  EXPECT_TRUE(has(f.reason, "rank 1 exited with code 1: loss nan")) << f.reason;
  AttemptPlan p = plan_attempt({0, 2, 3}, 2);
  EXPECT_EQ(p.hosts, (std::vector<int>{0, 2}));
  EXPECT_FALSE(p.shrunk);
  p = plan_attempt({3}, 2);
  EXPECT_EQ(p.hosts, (std::vector<int>{3}));
  EXPECT_TRUE(p.shrunk);
}

TEST(DriverPolicy, RetryLimits) {
  RetryPolicy same(3, 10);
  auto fault = [](int step) { return FaultRecord{"crash", "rank 1 exited with code 1", 1, 0, step}; };
  EXPECT_FALSE(same.after_fault(fault(6), 0, false));
  EXPECT_FALSE(same.after_fault(fault(6), 1, false));
  auto end = same.after_fault(fault(5), 2, false);
  ASSERT_TRUE(end);
  EXPECT_TRUE(has(*end, "3 failures in a row without getting past step 5")) << *end;
  // Progress past the last failure resets the count.
  RetryPolicy progress(2, 10);
  EXPECT_FALSE(progress.after_fault(fault(6), 0, false));
  EXPECT_FALSE(progress.after_fault(fault(9), 1, false));
  EXPECT_TRUE(progress.after_fault(fault(9), 2, false));
  RetryPolicy restarts(5, 2);
  EXPECT_FALSE(restarts.after_fault(fault(2), 1, false));
  EXPECT_TRUE(has(*restarts.after_fault(fault(8), 2, false), "--max-restarts"));
  RetryPolicy startup(3, 10);
  EXPECT_TRUE(has(*startup.after_fault(fault(0), 0, true), "is not retried"));
}

// ---- the output queue --------------------------------------------------------------------------

std::string read_all(int fd) {
  std::string s;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return s;
    s.append(buf, (size_t)n);
  }
}

TEST(DriverPolicy, OutputToAReaderThatDoesNotReadDropsLinesNeverKeptMessages) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  std::string got;
  {
    OutputQueue q(p[1], 64 << 10, "note: ", milliseconds(5000));
    // 10 MB of lines into a pipe nobody reads yet: push_line returns (it does not block) and drops.
    const std::string line(1000, 'x');
    int accepted = 0;
    for (int i = 0; i < 10000; i++) {
      accepted += q.push_line(line);
      if (i % 1000 == 0) q.push_kept("beat " + std::to_string(i / 1000));
    }
    EXPECT_GT(q.dropped(), 0u);
    EXPECT_EQ(q.dropped() + (size_t)accepted, 10000u);
    EXPECT_TRUE(q.kept_pending());
    q.push_line("after");
    // Now the reader reads: everything kept arrives, then the queue is empty.
    std::thread reader([&] { got = read_all(p[0]); });
    EXPECT_TRUE(q.flush(milliseconds(60000)));
    EXPECT_FALSE(q.kept_pending());
    ::close(p[1]);  // the queue's destructor finds it empty
    reader.join();
  }
  ::close(p[0]);
  size_t at = 0;
  for (int i = 0; i < 10; i++) {
    const size_t found = got.find("beat " + std::to_string(i) + "\n", at);
    ASSERT_NE(found, std::string::npos) << "kept message " << i << " lost";
    at = found;
  }
  EXPECT_TRUE(has(got, "note: ")) << "no note of the dropped lines";
  EXPECT_TRUE(has(got, "line(s) dropped: the output was not read"));
  EXPECT_TRUE(has(got, "after\n"));
}

TEST(DriverPolicy, AQueueWhoseReaderIsGoneDropsEverything) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]);
  ::signal(SIGPIPE, SIG_IGN);
  OutputQueue q(p[1], 1 << 20);
  q.push_kept("lost");
  EXPECT_TRUE(q.flush(milliseconds(10000)));
  EXPECT_FALSE(q.push_line("also lost"));
  ::close(p[1]);
}

// ---- the store watch ---------------------------------------------------------------------------

class DriverStore : public ms::testing::TempDirTest {};

TEST_F(DriverStore, AKilledRedisServerIsStartedAgain) {
  Janitor janitor({MEGASCALE_BINARY, "janitor"});
  JobStore store(parse_store_spec("redis"), dir_.string(), "heal", janitor);
  EXPECT_EQ(store.heal(true), "");
  const std::string url = store.url(), password = store.password();
  const pid_t pid = store.server_pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // The watch (no PING needed: the process ended) notices and starts a new server.
  std::string what;
  for (int i = 0; i < 100 && what.empty(); i++) {
    what = store.heal(false);
    if (what.empty()) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(has(what, "killed by signal 9")) << what;
  EXPECT_TRUE(has(what, "a new redis-server serves the store")) << what;
  EXPECT_NE(store.server_pid(), pid);
  EXPECT_NE(store.password(), password);
  EXPECT_EQ(store.env("run")["MEGASCALE_STORE"], store.url());
  const int port = std::stoi(store.url().substr(store.url().rfind(':') + 1));
  EXPECT_TRUE(ms::redis_ping("127.0.0.1", port, store.password(), milliseconds(2000)).ok());
  EXPECT_EQ(store.heal(true), "");
  (void)url;
}

TEST_F(DriverStore, AFileStoreWhoseFolderWentIsMadeAgain) {
  Janitor janitor({MEGASCALE_BINARY, "janitor"});
  JobStore store(parse_store_spec("file"), dir_.string(), "heal", janitor);
  EXPECT_EQ(store.heal(true), "");
  const std::string folder = store.url().substr(5);  // "file:<folder>"
  std::filesystem::remove_all(folder);
  EXPECT_TRUE(has(store.heal(false), "made again"));
  EXPECT_TRUE(std::filesystem::is_directory(folder));
  EXPECT_EQ(store.heal(false), "");
}

TEST_F(DriverStore, AnOutsideStoreThatDoesNotAnswerIsUnreachable) {
  Janitor janitor({MEGASCALE_BINARY, "janitor"});
  const int port = free_loopback_port();  // nobody listens there
  JobStore store(parse_store_spec("redis://127.0.0.1:" + std::to_string(port)), dir_.string(), "gone", janitor);
  EXPECT_EQ(store.heal(false), "");  // without a PING nothing is known
  try {
    store.heal(true);
    FAIL() << "no error";
  } catch (const ms::Error& e) {
    EXPECT_TRUE(has(e.what(), "rendezvous store unreachable")) << e.what();
    EXPECT_TRUE(has(e.what(), std::to_string(port))) << e.what();
  }
}

}  // namespace
