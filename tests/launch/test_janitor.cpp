// test_janitor: the launcher's clean-up pieces on their own. spawn(): a child that cannot exec is an
// ms::Error naming the program; new_group makes the child a group leader; die_with_parent kills the
// child when its parent dies. Janitor: an owner that dies (SIGKILL) has its registered process groups
// killed and its registered paths removed; release() leaves everything alone; the janitor ignores
// SIGTERM/SIGINT/SIGHUP, refuses pgid <= 1 and paths with "..", and a program that is not a janitor
// is refused.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>

#include "base/check.h"
#include "common/test_util.h"
#include "launch/janitor.h"
#include "launch/process.h"

namespace {

using ms::testing::eventually;

namespace fs = std::filesystem;
using ms::launch::Janitor;
using ms::launch::SpawnOptions;

const std::string kBin = MEGASCALE_BINARY;

// A process that exists and is not a zombie.
bool alive(long pid) {
  std::string stat = ms::testing::slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (stat.empty() || close == std::string::npos || close + 2 >= stat.size()) return false;
  return stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

// The process group of pid (-1 when it is gone).
long pgid_of(long pid) {
  std::string stat = ms::testing::slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  char state;
  long ppid, pgrp;
  if (std::sscanf(stat.c_str() + close + 2, "%c %ld %ld", &state, &ppid, &pgrp) != 3) return -1;
  return pgrp;
}

pid_t start_sleep(bool new_group, bool die_with_parent) {
  SpawnOptions so;
  so.new_group = new_group;
  so.die_with_parent = die_with_parent;
  return ms::launch::spawn({"/bin/sleep", "60"}, ms::launch::current_environment(), so);
}

void kill_and_reap(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);
  int st;
  ::waitpid(pid, &st, 0);
}

// Runs body in a forked child (the "owner"), which writes pids into `pids_file` and then waits to be
// killed; returns the child's pid once the file is complete (a line "done").
pid_t fork_owner(const std::string& pids_file, const std::function<void(std::ofstream&)>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      std::ofstream f(pids_file + ".tmp");
      body(f);
      f << "done\n";
      f.close();
      fs::rename(pids_file + ".tmp", pids_file);
    } catch (const std::exception& e) {
      std::ofstream(pids_file) << "error " << e.what() << "\n";
    }
    for (;;) ::pause();
  }
  eventually([&] { return fs::exists(pids_file); }, 20);
  return pid;
}

std::vector<long> read_numbers(const std::string& file, const std::string& key) {
  std::vector<long> v;
  std::ifstream f(file);
  std::string k;
  long n;
  while (f >> k) {
    if (k == "done") break;
    if (k == "error") {
      std::string rest;
      std::getline(f, rest);
      ADD_FAILURE() << "owner failed:" << rest;
      break;
    }
    f >> n;
    if (k == key) v.push_back(n);
  }
  return v;
}

class JanitorTest : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_janitor"; }
};

TEST_F(JanitorTest, SpawnReportsExecFailureAndMakesGroups) {
  try {
    ms::launch::spawn({"/nonexistent/program"}, {}, {});
    FAIL() << "no error";
  } catch (const ms::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot start /nonexistent/program: No such file"), std::string::npos)
        << e.what();
  }
  const pid_t p = start_sleep(true, false);
  EXPECT_EQ(pgid_of(p), p) << "new_group: the child leads its own group when spawn returns";
  kill_and_reap(p);
}

TEST_F(JanitorTest, DieWithParentKillsTheChildWhenItsParentDies) {
  const std::string pids = path("pids");
  const pid_t owner = fork_owner(pids, [](std::ofstream& f) {
    f << "bound " << start_sleep(true, true) << "\n";
    f << "free " << start_sleep(true, false) << "\n";
  });
  const auto bound = read_numbers(pids, "bound"), free = read_numbers(pids, "free");
  ASSERT_EQ(bound.size(), 1u);
  ASSERT_EQ(free.size(), 1u);
  EXPECT_TRUE(alive(bound[0]));
  kill_and_reap(owner);
  EXPECT_TRUE(eventually([&] { return !alive(bound[0]); }, 5)) << "die_with_parent child outlived its parent";
  EXPECT_TRUE(alive(free[0])) << "a child without die_with_parent lives on";
  ::kill(-(pid_t)free[0], SIGKILL);
}

TEST_F(JanitorTest, KilledOwnerIsCleanedUpAfter) {
  const std::string pids = path("pids");
  const fs::path keep = dir_ / "keep", gone = dir_ / "gone", forgotten = dir_ / "forgotten", sub = dir_ / "sub";
  for (const auto& d : {keep, gone / "deep", forgotten, sub / "x"}) fs::create_directories(d);
  std::ofstream(gone / "deep" / "file") << "x";
  const std::string gc_file = (dir_ / "gc").string();
  const pid_t owner = fork_owner(pids, [&](std::ofstream& f) {
    auto* j = new Janitor({kBin, "janitor"});  // leaked on purpose: the owner dies with it held
    // A group whose leader leaves a grandchild (no parent-death signal reaches either).
    SpawnOptions so;
    so.new_group = true;
    const pid_t watched = ms::launch::spawn({"/bin/sh", "-c", "sleep 60 & echo $! > " + gc_file + "; wait"},
                                            ms::launch::current_environment(), so);
    const pid_t forgot = start_sleep(true, false);
    j->watch_group(watched);
    j->watch_group(forgot);
    j->forget_group(forgot);
    j->watch_path(gone);
    j->watch_path(forgotten);
    j->forget_path(forgotten);
    j->watch_path(sub / ".." / "keep");  // refused by the janitor: ".."
    eventually([&] { return !ms::testing::slurp(gc_file).empty(); }, 10);
    f << "janitor " << j->pid() << "\nwatched " << watched << "\nforgot " << forgot << "\n";
  });
  const auto janitor = read_numbers(pids, "janitor"), watched = read_numbers(pids, "watched"),
             forgot = read_numbers(pids, "forgot");
  ASSERT_EQ(janitor.size(), 1u);
  ASSERT_EQ(watched.size(), 1u);
  ASSERT_EQ(forgot.size(), 1u);
  const std::string gc_text = ms::testing::slurp(gc_file);
  ASSERT_FALSE(gc_text.empty());
  const long gc = std::stol(gc_text);
  EXPECT_TRUE(alive(gc));
  EXPECT_TRUE(alive(janitor[0]));
  // The janitor ignores the polite signals (a Ctrl-C to the terminal must not end it first).
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::kill((pid_t)janitor[0], sig);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(alive(janitor[0])) << "the janitor died of a signal it should ignore";

  kill_and_reap(owner);
  EXPECT_TRUE(eventually([&] { return !alive(watched[0]) && !alive(gc) && !fs::exists(gone); }, 10));
  EXPECT_FALSE(alive(watched[0])) << "a watched group survived its owner";
  EXPECT_FALSE(alive(gc)) << "a watched group's grandchild survived its owner";
  EXPECT_FALSE(fs::exists(gone)) << "a watched path survived its owner";
  EXPECT_TRUE(eventually([&] { return !alive(janitor[0]); }, 10)) << "the janitor did not exit";
  EXPECT_TRUE(alive(forgot[0])) << "a forgotten group was killed";
  EXPECT_TRUE(fs::exists(forgotten)) << "a forgotten path was removed";
  EXPECT_TRUE(fs::exists(keep)) << "a path with '..' was removed";
  EXPECT_TRUE(fs::exists(sub / "x"));
  ::kill(-(pid_t)forgot[0], SIGKILL);
}

TEST_F(JanitorTest, ReleaseLeavesEverythingAlone) {
  const fs::path d = dir_ / "kept";
  fs::create_directories(d);
  const pid_t s = start_sleep(true, false);
  pid_t jpid;
  {
    Janitor j({kBin, "janitor"});
    jpid = j.pid();
    ASSERT_GT(jpid, 0);
    EXPECT_EQ(pgid_of(jpid), jpid) << "the janitor runs in a process group of its own";
    j.watch_group(s);
    j.watch_path(d);
    EXPECT_THROW(j.watch_group(1), ms::Error);
    EXPECT_THROW(j.watch_group(0), ms::Error);
    j.release();
    EXPECT_EQ(j.pid(), -1);
    EXPECT_THROW(j.watch_group(s), ms::Error) << "released";
  }
  EXPECT_FALSE(alive(jpid)) << "release() reaps the janitor";
  EXPECT_TRUE(alive(s));
  EXPECT_TRUE(fs::exists(d));
  kill_and_reap(s);
}

TEST_F(JanitorTest, AProgramThatIsNotAJanitorIsRefused) {
  try {
    Janitor j({"/bin/true", "janitor"});
    FAIL() << "no error";
  } catch (const ms::Error& e) {
    EXPECT_NE(std::string(e.what()).find("did not greet"), std::string::npos) << e.what();
  }
}

}  // namespace
