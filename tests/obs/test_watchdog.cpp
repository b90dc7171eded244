// The hang watchdog (obs/watchdog.h) and its dump (obs/hang_dump.h): the pure scan against
// synthetic ring records; then, in forked children (the watchdog ends its process), an op past its
// deadline ends the rank with exit code 86 after writing a dump that names the op; a provisional
// dump is removed when the op ends in time; a WatchedWait past its limit and the comm layer's fatal
// failure policy end the rank the same way; a stopped process's dump says how long it was frozen.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "comm/comm_fatal.h"
#include "common/test_util.h"
#include "obs/hang_dump.h"
#include "obs/watchdog.h"

namespace ms {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

TraceRecord op(const char* name, const std::string& group, uint64_t seq, int64_t start, int64_t deadline, int64_t end = 0) {
  TraceRecord r;
  r.name = name, r.group = group, r.seq = seq, r.peer = -1;
  r.enqueue_ns = r.start_ns = start, r.deadline_ns = deadline, r.end_ns = end;
  r.status = end ? "ok" : "running";
  return r;
}

TEST(WatchdogScan, OverdueAndSuspectOps) {
  const int64_t s = 1'000'000'000;
  std::vector<TraceRecord> ring = {
      op("all_reduce", "dp[tp=0,pp=0]", 3, s, 5 * s, 2 * s),  // finished: never overdue
      op("all_gather", "tp[dp=0,pp=0]", 7, 2 * s, 6 * s),       // running, deadline 6 s
      op("send", "pp[tp=0,dp=0]", 1, 4 * s, 0),                 // no deadline: ignored
  };
  ring.push_back(op("recv", "pp[tp=0,dp=0]", 2, 0, 0));  // queued
  EXPECT_TRUE(Watchdog::overdue(ring, 6 * s + s / 2, s).empty());  // within the grace
  auto late = Watchdog::overdue(ring, 7 * s + 1, s);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(late[0].seq, 7u);
  EXPECT_TRUE(Watchdog::suspects(ring, 4 * s - 1, 0.5).empty());  // half of [2 s, 6 s] is 4 s
  ASSERT_EQ(Watchdog::suspects(ring, 4 * s + 1, 0.5).size(), 1u);
  const std::string d = Watchdog::describe(late[0], 7 * s + s / 10);
  EXPECT_NE(d.find("all_gather on group 'tp[dp=0,pp=0]' (seq 7)"), std::string::npos) << d;
  EXPECT_NE(d.find("1.1 s past its deadline"), std::string::npos) << d;
}

TEST(HangDump, DocumentFields) {
  HangDumpInput in;
  in.kind = HangDumpKind::kTimeout;
  in.reason = "test";
  in.now_ns = 5;
  in.fallback_rank = 3, in.fallback_world = 8;
  in.comm = {op("all_reduce", "world", 4, 10, 20)};
  in.stuck = in.comm;
  const nlohmann::json j = make_hang_dump(in);
  EXPECT_EQ(j["format"], 1);
  EXPECT_EQ(j["kind"], "timeout");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["world"], 8);
  ASSERT_EQ(j["ring"].size(), 1u);
  EXPECT_EQ(j["ring"][0]["state"], "running");
  EXPECT_EQ(j["ring"][0]["seq"], 4);
  EXPECT_EQ(j["stuck"][0]["op"], "all_reduce");
  EXPECT_EQ(hang_dump_path("/x", 3), "/x/hang/rank-00003.json");
}

// Runs body in a forked child; returns its exit code (or -signal) and the time it took.
struct Child {
  int code = -1;
  double seconds = 0;
};
template <class F>
Child in_child(F body, double limit_s = 20) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  Child c;
  int st = 0;
  for (;;) {
    const pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      ADD_FAILURE() << "the child did not end within " << limit_s << " s";
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  c.code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

WatchdogOptions fast(const std::string& dir) {
  WatchdogOptions o;
  o.out_dir = dir;
  o.rank = 2, o.world = 4;
  o.tick = 50ms, o.grace = 200ms, o.frozen_threshold = 400ms;
  return o;
}

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(testing::slurp(path)); }

class WatchdogProc : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("watchdog"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(WatchdogProc, AnOpPastItsDeadlineEndsTheRankWithADump) {
  const std::string dir = dir_;
  const Child c = in_child([dir] {
    Watchdog::start(fast(dir));
    TraceRecord r = op("all_gather", "tp[dp=1,pp=0]", 41, steady_ns(), steady_ns() + 500'000'000);
    r.peer = 1;
    TraceSink::get().open(TraceTrack::kComm, r);
    std::this_thread::sleep_for(10s);  // "hung"
  });
  EXPECT_EQ(c.code, kHangExitCode);
  EXPECT_GE(c.seconds, 0.7);  // deadline 0.5 s + grace 0.2 s
  EXPECT_LT(c.seconds, 5.0);
  const nlohmann::json j = read_json(dir_ + "/hang/rank-00002.json");
  EXPECT_EQ(j["kind"], "timeout");
  EXPECT_EQ(j["rank"], 2);
  ASSERT_EQ(j["stuck"].size(), 1u) << j.dump(1);
  EXPECT_EQ(j["stuck"][0]["op"], "all_gather");
  EXPECT_EQ(j["stuck"][0]["group"], "tp[dp=1,pp=0]");
  EXPECT_EQ(j["stuck"][0]["seq"], 41);
  EXPECT_NE(j["reason"].get<std::string>().find("all_gather on group 'tp[dp=1,pp=0]' (seq 41, peer 1)"), std::string::npos);
}

TEST_F(WatchdogProc, AProvisionalDumpIsRemovedWhenTheOpEndsInTime) {
  const std::string dir = dir_;
  const Child c = in_child([dir] {
    Watchdog& w = Watchdog::start(fast(dir));
    const int64_t t0 = steady_ns();
    const uint64_t id = TraceSink::get().open(TraceTrack::kComm, op("all_reduce", "world", 3, t0, t0 + 1'000'000'000));
    std::this_thread::sleep_for(800ms);  // past half the time: a suspect dump
    nlohmann::json j = read_json(w.dump_path());
    if (j["kind"] != "suspect") _exit(10);
    TraceSink::get().close(TraceTrack::kComm, id, steady_ns(), "ok");
    std::this_thread::sleep_for(400ms);
    if (fs::exists(w.dump_path())) _exit(11);
    _exit(0);
  });
  EXPECT_EQ(c.code, 0) << "10: no suspect dump, 11: not removed";
}

TEST_F(WatchdogProc, AWatchedWaitPastItsLimitEndsTheRank) {
  const std::string dir = dir_;
  const Child c = in_child([dir] {
    Watchdog::start(fast(dir));
    WatchedWait w("MPI_Init_thread", "world", 300ms);
    std::this_thread::sleep_for(10s);
  });
  EXPECT_EQ(c.code, kHangExitCode);
  const nlohmann::json j = read_json(dir_ + "/hang/rank-00002.json");
  ASSERT_GE(j["stuck"].size(), 1u) << j.dump(1);
  EXPECT_EQ(j["stuck"][0]["op"], "MPI_Init_thread");
  EXPECT_TRUE(j["ring"].empty()) << "a watched wait is not a ring op";
}

TEST_F(WatchdogProc, TheFatalCommPolicyDumpsAndEnds) {
  const std::string dir = dir_;
  const Child c = in_child([dir] {
    Watchdog::start(fast(dir));
    set_comm_failure_handler([](const std::string& what) { Watchdog::get()->fatal(HangDumpKind::kCommError, what); });
    report_comm_failure("all_reduce on group 'world' (seq 9) failed: timed out");
    _exit(3);  // not reached
  });
  EXPECT_EQ(c.code, kHangExitCode);
  const nlohmann::json j = read_json(dir_ + "/hang/rank-00002.json");
  EXPECT_EQ(j["kind"], "comm_error");
  EXPECT_NE(j["reason"].get<std::string>().find("seq 9"), std::string::npos);
}

TEST_F(WatchdogProc, TheDefaultPolicyReturns) {
  set_comm_failure_handler(nullptr);
  EXPECT_FALSE(comm_failure_fatal());
  report_comm_failure("nothing happens");  // returns: the CommError reaches the waiter
}

TEST_F(WatchdogProc, AStoppedProcessSaysHowLongItWasFrozen) {
  const std::string dir = dir_;
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    Watchdog& w = Watchdog::start(fast(dir));
    std::this_thread::sleep_for(200ms);
    raise(SIGSTOP);
    w.on_signal(SIGTERM);  // as the launcher's SIGTERM after a SIGCONT
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(st));
  std::this_thread::sleep_for(1500ms);
  kill(pid, SIGCONT);
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  const nlohmann::json j = read_json(dir_ + "/hang/rank-00002.json");
  EXPECT_EQ(j["kind"], "signal");
  EXPECT_GE(j["frozen_ns"].get<int64_t>(), 1'000'000'000) << j.dump(1);
  EXPECT_LT(j["frozen_ns"].get<int64_t>(),
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace
}  // namespace ms
