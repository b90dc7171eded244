// Warm standby processes (launch/standby.h): the rank side applies its assignment and nothing
// else, and an executor hands its standbys the ranks of the next `run` of the same command (the
// very processes it started ahead, with the environment a cold start would have had), or starts
// cold when a standby ended unasked.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "launch/heartbeat.h"
#include "launch/process.h"
#include "launch/standby.h"

namespace ms::launch {
namespace {

using nlohmann::json;

// Runs fn in a forked child with `line` (closed after) on its stdin and MEGASCALE_STANDBY set;
// returns the child's wait status.
template <class F>
int in_standby_child(const std::string& line, F fn) {
  int p[2];
  EXPECT_EQ(::pipe(p), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[1]);
    ::dup2(p[0], 0);
    ::close(p[0]);
    ::setenv(kStandbyEnv, "1", 1);
    ::_exit(fn());
  }
  ::close(p[0]);
  if (!line.empty()) {
    EXPECT_EQ(::write(p[1], line.data(), line.size()), (ssize_t)line.size());
  }
  ::close(p[1]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return st;
}

TEST(Standby, WithoutTheFlagNothingWaits) {
  ::unsetenv(kStandbyEnv);
  EXPECT_FALSE(await_standby_assignment());
}

TEST(Standby, TheAssignmentIsAppliedInFullAndStdinIsThenEmpty) {
  const std::string line = encode_standby_assignment({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"MS_X", "a b=c"}});
  const int st = in_standby_child(line, [] {
    if (!await_standby_assignment()) return 10;
    const char* r = std::getenv("RANK");
    const char* w = std::getenv("WORLD_SIZE");
    const char* x = std::getenv("MS_X");
    if (!r || std::string(r) != "3" || !w || std::string(w) != "8" || !x || std::string(x) != "a b=c") return 11;
    if (std::getenv(kStandbyEnv) != nullptr) return 12;  // children see a plain rank
    char c;
    if (::read(0, &c, 1) != 0) return 13;                 // stdin is /dev/null now
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(Standby, TheEndOfStdinWithoutAnAssignmentExitsZeroAtOnce) {
  const int st = in_standby_child("", [] {
    await_standby_assignment();
    return 20;  // never reached
  });
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(Standby, AMalformedAssignmentIsANamedError) {
  for (const std::string& line : {std::string("not json\n"), std::string("{\"RANK\": 3}\n")}) {
    const int st = in_standby_child(line, [] {
      try {
        await_standby_assignment();
      } catch (const std::exception& e) {
        return std::string(e.what()).find("standby assignment") != std::string::npos ? 0 : 31;
      }
      return 30;
    });
    ASSERT_TRUE(WIFEXITED(st)) << line;
    EXPECT_EQ(WEXITSTATUS(st), 0) << line;
  }
}

// A `megascale executor` driven through its channel, as the driver does.
class ExecutorUnderTest {
 public:
  ExecutorUnderTest() {
    dir_ = ms::testing::make_temp_dir("standby-exec");
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    pid_ = spawn({MEGASCALE_BINARY, "executor", "--host-index", "0", "--beat-ms", "50", "--run-dir", dir_},
                 current_environment(), SpawnOptions{in[0], out[1], -1, true, false});
    ::close(in[0]), ::close(out[1]);
    to_ = in[1], from_ = out[0];
    EXPECT_EQ(::fcntl(from_, F_SETFL, O_NONBLOCK), 0);  // LineReader::read_from reads what is there
  }
  ~ExecutorUnderTest() {
    ::close(to_);  // the end of stdin: it ends everything and exits
    int st = 0;
    ::waitpid(pid_, &st, 0);
    ::close(from_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void send(const json& j) {
    const std::string s = j.dump() + "\n";
    ASSERT_EQ(::write(to_, s.data(), s.size()), (ssize_t)s.size());
  }
  // Reads messages until pred(message) holds (true) or `seconds` pass (false); keeps every line.
  template <class P>
  bool until(P pred, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      std::string line;
      while (reader_.next(line)) {
        const json j = parse_message(line, "executor");
        if (j.value("type", "") == "line") lines.push_back(j);
        if (pred(j)) return true;
      }
      pollfd p{from_, POLLIN, 0};
      ::poll(&p, 1, 100);
      if (p.revents && !reader_.read_from(from_)) return false;
    }
    return false;
  }
  std::vector<json> lines;

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  LineReader reader_;
};

const std::vector<std::string> kEchoAssignment = {"/bin/sh", "-c", "read -r a; echo \"$a\""};

bool all_exited_zero(const json& j, size_t n) {
  if (j.value("type", "") != "beat") return false;
  const HostBeat b = j.get<HostBeat>();
  if (b.ranks.size() != n) return false;
  for (const RankBeat& r : b.ranks)
    if (r.state != "exited" || r.exit_code != 0) return false;
  return true;
}

TEST(Standby, AnExecutorHandsItsStandbysTheNextRunsRanks) {
  ExecutorUnderTest ex;
  ex.send(StandbyCommand{kEchoAssignment, 2});
  std::set<int64_t> warm;
  ASSERT_TRUE(ex.until([&](const json& j) {
    if (j.value("type", "") != "beat") return false;
    const HostBeat b = j.get<HostBeat>();
    warm = std::set<int64_t>(b.standby.begin(), b.standby.end());
    return warm.size() == 2;
  }, 20)) << "no beat with 2 standbys";
  RunCommand run;
  run.attempt = 0, run.world = 4, run.ranks = {2, 3}, run.argv = kEchoAssignment;
  run.env = {{"MS_STORE_HINT", "x"}};
  ex.send(run);
  json last;
  ASSERT_TRUE(ex.until([&](const json& j) { return all_exited_zero(j, 2) && (last = j, true); }, 20));
  const HostBeat b = last.get<HostBeat>();
  for (const RankBeat& r : b.ranks) {
    EXPECT_TRUE(r.warm) << "rank " << r.rank;
    EXPECT_TRUE(warm.count(r.pid)) << "rank " << r.rank << " is not one of the standbys started before the run";
  }
  ASSERT_EQ(ex.lines.size(), 2u);
  for (const json& l : ex.lines) {  // each rank printed the assignment it got: a cold start's environment
    const json a = json::parse(l.value("text", ""));
    EXPECT_EQ(a.value("RANK", ""), std::to_string(l.value("rank", -1)));
    EXPECT_EQ(a.value("LOCAL_RANK", ""), l.value("rank", -1) == 2 ? "0" : "1");
    EXPECT_EQ(a.value("WORLD_SIZE", ""), "4");
    EXPECT_EQ(a.value("LOCAL_WORLD_SIZE", ""), "2");
    EXPECT_EQ(a.value("MEGASCALE_RESTART_COUNT", ""), "0");
    EXPECT_EQ(a.value("MS_STORE_HINT", ""), "x");
    EXPECT_FALSE(a.value("MEGASCALE_MEM_DIR", "").empty());
  }
}

TEST(Standby, AStandbyThatEndsUnaskedTurnsThemOffAndRanksStartCold) {
  ExecutorUnderTest ex;
  // It ends on its own after a second (unasked): long enough for a beat (every 50 ms) to show it.
  ex.send(StandbyCommand{{"/bin/sh", "-c", "sleep 1; exit 1"}, 1});
  auto standbys = [](const json& j) -> int {
    return j.value("type", "") == "beat" ? (int)j.get<HostBeat>().standby.size() : -1;
  };
  ASSERT_TRUE(ex.until([&](const json& j) { return standbys(j) == 1; }, 20)) << "the standby never started";
  ASSERT_TRUE(ex.until([&](const json& j) { return standbys(j) == 0; }, 20)) << "the standby's end was not seen";
  const std::vector<std::string> argv = {"/bin/sh", "-c", "echo rank $RANK"};
  ex.send(StandbyCommand{argv, 1});  // a new command: still off
  RunCommand run;
  run.world = 1, run.ranks = {0}, run.argv = argv;
  ex.send(run);
  json last;
  ASSERT_TRUE(ex.until([&](const json& j) { return all_exited_zero(j, 1) && (last = j, true); }, 20));
  EXPECT_FALSE(last.get<HostBeat>().ranks[0].warm);
  ASSERT_EQ(ex.lines.size(), 1u);
  EXPECT_EQ(ex.lines[0].value("text", ""), "rank 0");
}

}  // namespace
}  // namespace ms::launch

namespace ms::launch {
namespace {

// The OpenMP runtime reads OMP_NUM_THREADS once, when it loads: a standby started with another
// value than a rank's environment names is not handed that rank (it starts cold, with the value).
TEST(Standby, ARankWhoseThreadCountDiffersStartsCold) {
  ExecutorUnderTest ex;
  const std::vector<std::string> argv = {"/bin/sh", "-c", "read -r a; echo \"omp=$OMP_NUM_THREADS\""};
  ex.send(StandbyCommand{argv, 1});
  ASSERT_TRUE(ex.until([&](const json& j) {
    return j.value("type", "") == "beat" && j.get<HostBeat>().standby.size() == 1;
  }, 20));
  RunCommand run;
  run.world = 1, run.ranks = {0}, run.argv = argv, run.env = {{"OMP_NUM_THREADS", "7"}};
  ex.send(run);
  json last;
  ASSERT_TRUE(ex.until([&](const json& j) { return all_exited_zero(j, 1) && (last = j, true); }, 20));
  const HostBeat b = last.get<HostBeat>();
  EXPECT_FALSE(b.ranks[0].warm);
  EXPECT_EQ(b.standby.size(), 1u) << "the standby still waits";
  ASSERT_EQ(ex.lines.size(), 1u);
  EXPECT_EQ(ex.lines[0].value("text", ""), "omp=7");
}

}  // namespace
}  // namespace ms::launch
