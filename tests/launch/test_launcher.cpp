// test_launcher: `megascale launch` end to end, with /bin/sh children: each rank's environment, the
// forwarded and prefixed output, failure propagation (the failing rank named, the others stopped),
// signal forwarding (SIGHUP as SIGTERM), the file and redis stores (created and removed), and
// rejected options; and
// `megascale bench comm` on a few ranks (its workers check every result against a closed form).
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "bench_comm.h"
#include "launch/host_launcher.h"  // shell_quote
#include "launch/launcher.h"
#include "common/processes.h"
#include "common/test_util.h"

namespace {

using ms::testing::eventually;

using ms::testing::CmdResult;
using ms::testing::run_cmd;
namespace fs = std::filesystem;

const std::string kBin = MEGASCALE_BINARY;

// Lines of out that start with "[rank k] ", as (k, rest).
std::vector<std::pair<int, std::string>> rank_lines(const std::string& out) {
  std::vector<std::pair<int, std::string>> v;
  std::istringstream in(out);
  std::string line;
  static const std::regex re(R"(^\[rank (\d+)\] (.*)$)");
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_match(line, m, re)) v.emplace_back(std::stoi(m[1]), m[2]);
  return v;
}

// A process that exists and is not a zombie.
bool alive(long pid) {
  std::string stat = ms::testing::slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (stat.empty() || close == std::string::npos || close + 2 >= stat.size()) return false;
  return stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

// Quotes s for sh (the launcher's own quoting, tested in test_host_launcher.cpp).
std::string q(const std::string& s) { return ms::launch::shell_quote(s); }

std::string launch(const std::string& opts, const std::string& script) {
  return kBin + " launch " + opts + " -- /bin/sh -c " + q(script);
}

// The numbers after "<key>" in the rank lines of out ("[rank 1] pid 123" -> 123 for key "pid ").
std::vector<long> numbers_after(const std::string& out, const std::string& key) {
  std::vector<long> v;
  for (const auto& [k, rest] : rank_lines(out))
    if (rest.rfind(key, 0) == 0) v.push_back(std::stol(rest.substr(key.size())));
  return v;
}

class Launcher : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_launcher"; }
  // A shell command: `launch --nproc 2 -- sh -c script` in the background with its output in out
  // (made before the poll starts: the background job's redirection may come later, and a missing
  // file would end the poll at once, the launcher then dying before its handlers exist); once both
  // ranks printed "ready", the launcher gets `kill -<sig>`; prints "launcher=<exit status>".
  std::string signal_when_ready(const std::string& script, const std::string& out, const std::string& sig) {
    return ": >" + out + "; " + launch("--nproc 2", script) + " >" + out + " 2>&1 & L=$!; i=0; " +
           "while [ $(grep -c ready " + out + ") -lt 2 ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; " +
           "kill -" + sig + " $L; wait $L; echo launcher=$?";
  }
};

TEST_F(Launcher, EveryRankGetsItsEnvironment) {
  const int n = 4;
  const std::string script =
      "echo env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $OMP_NUM_THREADS $MEGASCALE_BACKEND "
      "$MEGASCALE_HOST $MEGASCALE_STORE $MEGASCALE_RUN_ID";
  // ctest sets OMP_NUM_THREADS; unset it to get the launcher's default.
  CmdResult r = run_cmd("env -u OMP_NUM_THREADS " + launch("--nproc 4 --run-dir " + dir_.string(), script));
  ASSERT_EQ(r.code, 0) << r.output;
  std::set<int> ranks;
  std::set<std::string> stores, run_ids;
  for (const auto& [k, rest] : rank_lines(r.output)) {
    std::istringstream in(rest);
    std::string word, backend, host, store, run_id;
    int rank, world, local, local_world, omp;
    in >> word >> rank >> world >> local >> local_world >> omp >> backend >> host >> store >> run_id;
    ASSERT_EQ(word, "env") << r.output;
    EXPECT_EQ(rank, k) << "prefix and RANK differ: " << rest;
    EXPECT_EQ(local, k);
    EXPECT_EQ(world, n);
    EXPECT_EQ(local_world, n);
    EXPECT_EQ(omp, std::max(1, ms::usable_cores() / n));
    EXPECT_EQ(backend, "gloo");
    EXPECT_EQ(host, "127.0.0.1");
    ranks.insert(rank);
    stores.insert(store);
    run_ids.insert(run_id);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3})) << r.output;
  ASSERT_EQ(stores.size(), 1u) << "every rank must see the same store";
  ASSERT_EQ(run_ids.size(), 1u);
  const std::string store = *stores.begin();
  ASSERT_EQ(store.rfind("file:" + dir_.string() + "/store-", 0), 0u) << store;
  EXPECT_FALSE(std::filesystem::exists(store.substr(5))) << "the store folder must be removed at the end";

  // A second launch gets another run id; a user's OMP_NUM_THREADS is passed on as is.
  CmdResult r2 = run_cmd("OMP_NUM_THREADS=7 " + launch("--nproc 2", script));
  ASSERT_EQ(r2.code, 0) << r2.output;
  auto lines = rank_lines(r2.output);
  ASSERT_EQ(lines.size(), 2u) << r2.output;
  for (const auto& [k, rest] : lines) {
    EXPECT_NE(rest.find(" 7 gloo "), std::string::npos) << rest;
    EXPECT_EQ(rest.find(*run_ids.begin()), std::string::npos) << "run id reused: " << rest;
  }
}

TEST_F(Launcher, OutputIsPrefixedAndQuietOthersKeepsRankZero) {
  const std::string script = "echo out-a $RANK; echo err $RANK >&2; echo out-b $RANK; printf 'tail %s' $RANK";
  const std::string err = path("stderr.txt");
  for (bool quiet : {false, true}) {
    SCOPED_TRACE(quiet ? "--quiet-others" : "all ranks");
    CmdResult r = run_cmd("{ " + launch(std::string("--nproc 3") + (quiet ? " --quiet-others" : ""), script) +
                          " 2>" + err + "; }");
    ASSERT_EQ(r.code, 0) << r.output;
    std::multiset<std::string> out, expect_out, errs, expect_err;
    for (const auto& [k, rest] : rank_lines(r.output)) out.insert(std::to_string(k) + ":" + rest);
    for (const auto& [k, rest] : rank_lines(ms::testing::slurp(err))) errs.insert(std::to_string(k) + ":" + rest);
    for (int k = 0; k < 3; k++) {
      const std::string s = std::to_string(k);
      if (!quiet || k == 0)
        for (const char* w : {"out-a ", "out-b ", "tail "}) expect_out.insert(s + ":" + w + s);
      expect_err.insert(s + ":err " + s);
    }
    EXPECT_EQ(out, expect_out) << r.output;
    EXPECT_EQ(errs, expect_err) << ms::testing::slurp(err);
    // Nothing unprefixed reaches stdout.
    EXPECT_EQ(rank_lines(r.output).size(), std::count(r.output.begin(), r.output.end(), '\n')) << r.output;
  }
}

TEST_F(Launcher, FailingRankStopsTheOthers) {
  // Rank 2 fails; the others would sleep for ever (in a child of the shell, so the whole process
  // group must be stopped, not just the shell).
  const std::string script = "echo pid $$; if [ $RANK = 2 ]; then sleep 0.2; exit 3; fi; sleep 1000; echo woke";
  const auto t0 = std::chrono::steady_clock::now();
  CmdResult r = run_cmd(launch("--nproc 4", script));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 2 exited with code 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("woke"), std::string::npos) << r.output;
  EXPECT_LT(secs, 30.0) << "the sleeping ranks were not stopped";
  int pids = 0;
  for (const auto& [k, rest] : rank_lines(r.output))
    if (rest.rfind("pid ", 0) == 0) {
      pids++;
      EXPECT_FALSE(alive(std::stol(rest.substr(4)))) << "rank " << k << " outlived the launcher";
    }
  EXPECT_EQ(pids, 4) << r.output;
}

TEST_F(Launcher, RankKilledBySignalIsNamed) {
  CmdResult r = run_cmd(launch("--nproc 2", "if [ $RANK = 1 ]; then kill -9 $$; fi; sleep 1000"));
  EXPECT_EQ(r.code, 128 + 9) << r.output;
  EXPECT_NE(r.output.find("rank 1 killed by signal 9"), std::string::npos) << r.output;
}

TEST_F(Launcher, RankIgnoringSigtermIsKilled) {
  // Rank 0 ignores SIGTERM (and so does its sleep); after the grace period it gets SIGKILL.
  // Rank 1 fails only once rank 0 has set its trap.
  const std::string ready = path("ready");
  CmdResult r = run_cmd(launch("--nproc 2", "if [ $RANK = 1 ]; then while [ ! -e " + ready +
                                                " ]; do sleep 0.05; done; exit 1; fi; "
                                                "trap '' TERM; echo pid $$; touch " + ready + "; sleep 1000"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 exited with code 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0 still running"), std::string::npos) << r.output;
  for (const auto& [k, rest] : rank_lines(r.output))
    if (rest.rfind("pid ", 0) == 0) { EXPECT_FALSE(alive(std::stol(rest.substr(4)))); }
}

TEST_F(Launcher, SignalsAreForwarded) {
  // The launcher runs in the background; once both ranks are up it gets SIGTERM, which each rank
  // must see (its trap prints and exits 0). Every rank stopped cleanly, so the launcher exits 0
  // (preemption); a rank that fails after the signal makes it exit 128+15.
  const std::string out = path("out.txt");
  const std::string script = "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done";
  CmdResult r = run_cmd(signal_when_ready(script, out, "TERM"));
  const std::string text = ms::testing::slurp(out);
  EXPECT_NE(r.output.find("launcher=0"), std::string::npos) << r.output << text;
  EXPECT_NE(text.find("[rank 0] got TERM"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 1] got TERM"), std::string::npos) << text;
  EXPECT_NE(text.find("got signal 15"), std::string::npos) << text;
  EXPECT_NE(text.find("every rank exited 0"), std::string::npos) << text;

  const std::string failing = "trap 'echo got TERM; exit 3' TERM; echo ready; while :; do sleep 0.05; done";
  r = run_cmd(signal_when_ready(failing, out, "TERM"));
  EXPECT_NE(r.output.find("launcher=143"), std::string::npos) << r.output << ms::testing::slurp(out);
}

TEST_F(Launcher, SighupStopsTheRanksLikeSigterm) {
  // Closing the launch's terminal (SIGHUP) must not kill the ranks: they get SIGTERM (a training
  // run saves at its next step boundary), answer it and exit 0, and so does the launcher.
  const std::string out = path("out.txt");
  const std::string script = "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done";
  const CmdResult r = run_cmd(signal_when_ready(script, out, "HUP"));
  const std::string text = ms::testing::slurp(out);
  EXPECT_NE(r.output.find("launcher=0"), std::string::npos) << r.output << text;
  EXPECT_NE(text.find("[rank 0] got TERM"), std::string::npos) << text;
  EXPECT_NE(text.find("[rank 1] got TERM"), std::string::npos) << text;
  EXPECT_NE(text.find("every rank exited 0"), std::string::npos) << text;
}

TEST_F(Launcher, RedisStoreIsStartedAndStopped) {
  // Every rank pings the server and prints its pid; after the launch the server must be gone.
  const std::string script =
      "echo store $MEGASCALE_STORE; export REDISCLI_AUTH=$MEGASCALE_STORE_PASSWORD; redis-cli -u $MEGASCALE_STORE ping; "
      "redis-cli -u $MEGASCALE_STORE info server | tr -d '\\r' | grep '^process_id:'";
  CmdResult r = run_cmd(launch("--nproc 2 --store redis --run-dir " + dir_.string(), script));
  ASSERT_EQ(r.code, 0) << r.output;
  std::set<std::string> stores;
  std::set<long> pids;
  int pongs = 0;
  for (const auto& [k, rest] : rank_lines(r.output)) {
    if (rest.rfind("store ", 0) == 0) stores.insert(rest.substr(6));
    if (rest == "PONG") pongs++;
    if (rest.rfind("process_id:", 0) == 0) pids.insert(std::stol(rest.substr(11)));
  }
  EXPECT_EQ(pongs, 2) << r.output;
  ASSERT_EQ(stores.size(), 1u) << r.output;
  EXPECT_TRUE(std::regex_match(*stores.begin(), std::regex(R"(redis://127\.0\.0\.1:\d+)"))) << *stores.begin();
  ASSERT_EQ(pids.size(), 1u) << r.output;
  EXPECT_FALSE(alive(*pids.begin())) << "redis-server " << *pids.begin() << " left running";
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "the redis folder must be removed";

  // A given redis://host:port is passed on as is (and nothing is started).
  CmdResult r2 = run_cmd(launch("--nproc 1 --store redis://10.1.2.3:7777", "echo store $MEGASCALE_STORE"));
  ASSERT_EQ(r2.code, 0) << r2.output;
  EXPECT_NE(r2.output.find("[rank 0] store redis://10.1.2.3:7777"), std::string::npos) << r2.output;
}

TEST_F(Launcher, SigkilledLauncherLeavesNothingBehind) {
  // The launcher is SIGKILLed while its ranks (a shell and its background sleep each) run: the ranks
  // die with it (parent-death signal), the janitor kills their process groups (the sleeps) and the
  // redis-server's, and removes the store and launch folders.
  for (const std::string store : {"file", "redis"}) {
    SCOPED_TRACE(store);
    const fs::path run_dir = dir_ / ("run-" + store);
    fs::create_directories(run_dir);
    const std::string out = path("out-" + store + ".txt");
    std::string script = "echo pid $$; sleep 60 & echo gc $!; ";
    if (store == "redis")
      script += "REDISCLI_AUTH=$MEGASCALE_STORE_PASSWORD redis-cli -u $MEGASCALE_STORE info server | tr -d '\\r' | "
                "grep '^process_id:'; ";
    script += "echo ready; wait";
    ms::testing::Proc p = ms::testing::spawn({kBin, "launch", "--nproc", "2", "--store", store, "--run-dir",
                                              run_dir.string(), "--dashboard-port", "-1", "--", "/bin/sh", "-c", script},
                                             {}, out);
    ASSERT_GT(p.pid, 0);
    const bool ready = eventually([&] {
      const std::string o = p.output();
      return o.find("[rank 0] ready") != std::string::npos && o.find("[rank 1] ready") != std::string::npos;
    }, 60);
    const std::string text = p.output();
    std::vector<long> pids = numbers_after(text, "pid "), gcs = numbers_after(text, "gc "),
                      servers = numbers_after(text, "process_id:");
    if (!ready || pids.size() != 2 || gcs.size() != 2 || (store == "redis" && servers.size() != 2)) {
      ::kill(p.pid, SIGTERM);
      int st;
      ::waitpid(p.pid, &st, 0);
      FAIL() << "the ranks did not start: " << text;
    }
    pids.insert(pids.end(), gcs.begin(), gcs.end());
    if (store == "redis") pids.push_back(servers[0]);
    for (long pid : pids) EXPECT_TRUE(alive(pid)) << pid;
    EXPECT_FALSE(fs::is_empty(run_dir)) << "the store and launch folders exist during the launch";

    ASSERT_EQ(::kill(p.pid, SIGKILL), 0);
    int st = 0;
    ASSERT_EQ(::waitpid(p.pid, &st, 0), p.pid);
    // The janitor reports after it has cleaned up: wait for its line too (it comes just after the
    // folders are gone).
    const bool clean = eventually([&] {
      for (long pid : pids)
        if (alive(pid)) return false;
      return fs::is_empty(run_dir) && p.output().find("megascale janitor: owner") != std::string::npos;
    }, 10);
    for (long pid : pids) EXPECT_FALSE(alive(pid)) << "process " << pid << " outlived the SIGKILLed launcher";
    EXPECT_TRUE(fs::is_empty(run_dir)) << "folders left behind";
    EXPECT_TRUE(clean) << p.output();
    EXPECT_NE(p.output().find("megascale janitor: owner"), std::string::npos) << p.output();
    for (long pid : pids) ::kill((pid_t)pid, SIGKILL);  // only if a check above failed
  }
}

TEST_F(Launcher, RedisStorePasswordStaysSecret) {
  // Each rank has MEGASCALE_STORE_PASSWORD (it writes it to a file instead of printing it); an
  // unauthenticated PING gets NOAUTH; redis-server's command line (what ps shows) has no password,
  // only its config file, which is 0600 in a 0700 folder. The launcher's output never shows it.
  const fs::path run_dir = dir_ / "run";
  fs::create_directories(run_dir);
  const std::string r = run_dir.string(), d = dir_.string();
  const std::string script =
      "printf %s \"$MEGASCALE_STORE_PASSWORD\" > " + d + "/pw.$RANK; "
      "echo set $(env | grep -c '^MEGASCALE_STORE_PASSWORD='); "
      "echo noauth $(redis-cli -u $MEGASCALE_STORE ping); "
      "pid=$(REDISCLI_AUTH=$MEGASCALE_STORE_PASSWORD redis-cli -u $MEGASCALE_STORE info server | tr -d '\\r' | "
      "grep '^process_id:' | cut -d: -f2); echo server $pid; "
      "tr '\\0' ' ' < /proc/$pid/cmdline > " + d + "/cmdline.$RANK; "
      "tr '\\0' ' ' < /proc/$pid/environ > " + d + "/environ.$RANK; "
      "echo mode $(stat -c %a " + r + "/redis-*) $(stat -c %a " + r + "/redis-*/redis.conf) $(stat -c %a " + r +
      "/launch-*)";
  CmdResult res = run_cmd(launch("--nproc 2 --store redis --run-dir " + r, script));
  ASSERT_EQ(res.code, 0) << res.output;
  const std::string pw = ms::testing::slurp(d + "/pw.0");
  EXPECT_EQ(pw, ms::testing::slurp(d + "/pw.1")) << "every rank gets the same password";
  EXPECT_GE(pw.size(), 32u);
  EXPECT_TRUE(std::regex_match(pw, std::regex("[0-9a-f]+"))) << pw;
  EXPECT_EQ(res.output.find(pw), std::string::npos) << "the password is in the launcher's output";
  int set = 0, noauth = 0, modes = 0;
  for (const auto& [k, rest] : rank_lines(res.output)) {
    if (rest == "set 1") set++;
    if (rest.rfind("noauth ", 0) == 0) {
      EXPECT_NE(rest.find("NOAUTH"), std::string::npos) << rest;
      noauth++;
    }
    if (rest.rfind("mode ", 0) == 0) {
      EXPECT_EQ(rest, "mode 700 600 700") << "redis folder, its config file, launch folder";
      modes++;
    }
  }
  EXPECT_EQ(set, 2) << res.output;
  EXPECT_EQ(noauth, 2) << res.output;
  EXPECT_EQ(modes, 2) << res.output;
  const std::string cmdline = ms::testing::slurp(d + "/cmdline.0");
  EXPECT_NE(cmdline.find("redis-server"), std::string::npos) << cmdline;  // redis rewrites its argv: "... 127.0.0.1:PORT"
  EXPECT_EQ(cmdline.find(pw), std::string::npos) << "the password is on redis-server's command line: " << cmdline;
  const std::string environ_text = ms::testing::slurp(d + "/environ.0");
  EXPECT_FALSE(environ_text.empty());
  EXPECT_EQ(environ_text.find(pw), std::string::npos) << "the password is in redis-server's environment";
  EXPECT_TRUE(fs::is_empty(run_dir)) << "the redis folder (and its config file) must be removed";
}

TEST_F(Launcher, FileStoreFolderIsPrivate) {
  CmdResult r = run_cmd("umask 000; " + launch("--nproc 2 --run-dir " + dir_.string(),
                                               "echo mode $(stat -c %a ${MEGASCALE_STORE#file:} $MEGASCALE_LAUNCH_DIR)"));
  ASSERT_EQ(r.code, 0) << r.output;
  int modes = 0;
  for (const auto& [k, rest] : rank_lines(r.output))
    if (rest.rfind("mode ", 0) == 0) {
      EXPECT_EQ(rest, "mode 700 700") << "store and launch folders";
      modes++;
    }
  EXPECT_EQ(modes, 2) << r.output;
}

TEST_F(Launcher, SuccessEndsWhatTheRanksLeftBehind) {
  // Every rank exits 0 at once, leaving a background sleep in its process group: the launch succeeds
  // and the sleeps are gone with it.
  CmdResult r = run_cmd(launch("--nproc 2", "sleep 60 >/dev/null 2>&1 & echo gc $!; exit 0"));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<long> gcs = numbers_after(r.output, "gc ");
  ASSERT_EQ(gcs.size(), 2u) << r.output;
  EXPECT_TRUE(eventually([&] { return !alive(gcs[0]) && !alive(gcs[1]); }, 5));
  for (long pid : gcs) {
    EXPECT_FALSE(alive(pid)) << "a rank's grandchild " << pid << " outlived a successful launch";
    ::kill((pid_t)pid, SIGKILL);
  }
}

TEST_F(Launcher, BadOptionsAreRejected) {
  for (const char* n : {"0", "1025", "-3", "two"}) {
    CmdResult r = run_cmd(kBin + " launch --nproc " + n + " -- /bin/true");
    EXPECT_NE(r.code, 0) << n << ": " << r.output;
    EXPECT_NE(r.output.find("nproc"), std::string::npos) << n << ": " << r.output;
  }
  CmdResult none = run_cmd(kBin + " launch --nproc 2");
  EXPECT_NE(none.code, 0) << none.output;
  CmdResult store = run_cmd(kBin + " launch --nproc 2 --store etcd -- /bin/true");
  EXPECT_NE(store.code, 0) << store.output;
  EXPECT_NE(store.output.find("unknown store 'etcd'"), std::string::npos) << store.output;
  CmdResult missing = run_cmd(kBin + " launch --nproc 2 -- /nonexistent/program");
  EXPECT_NE(missing.code, 0) << missing.output;
  EXPECT_NE(missing.output.find("cannot start /nonexistent/program"), std::string::npos) << missing.output;
}

TEST_F(Launcher, BareWordRunsAMegascaleSubcommand) {
  // `-- prepare --help` runs this binary's prepare subcommand on every rank; "--key=" after "--" is
  // passed on untouched.
  CmdResult r = run_cmd(kBin + " launch --nproc 2 -- prepare --help");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[rank 1] "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--val-fraction"), std::string::npos) << r.output;
  CmdResult e = run_cmd(launch("--nproc 1", "echo \"args: $*\"") + " x --data.val=");
  ASSERT_EQ(e.code, 0) << e.output;
  EXPECT_NE(e.output.find("[rank 0] args: --data.val="), std::string::npos) << e.output;
}

TEST_F(Launcher, BenchCommRunsAndReportsNcclBandwidths) {
  // 3 and 4 ranks on both stores; bandwidth rows for 3 ranks (the smallest). A worker exits non-zero
  // when a collective's result differs from its closed form, so exit 0 means every op was right.
  const std::string json_path = path("bench.json");
  CmdResult r = run_cmd(kBin + " bench comm --ranks 4,3 --store file,redis --sizes 4K,64K --iters 2 --warmup 1 --json " +
                        json_path);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("init_world ms"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("busbw GB/s"), std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(ms::testing::slurp(json_path));
  ASSERT_EQ(j["runs"].size(), 4u) << j.dump(2);
  std::set<std::pair<std::string, int>> seen;
  for (const auto& run : j["runs"]) {
    const int n = run["ranks"];
    seen.insert({run["store"].get<std::string>(), n});
    EXPECT_GT(run["init_world_ms"].get<double>(), 0.0);
    EXPECT_GT(run["rank_grid_ms"].get<double>(), 0.0);
    EXPECT_EQ(run["grid"], n == 4 ? "tp=2,dp=2,pp=1" : "tp=1,dp=3,pp=1");
    const bool rows = n == 3 && run["store"] == "file";
    ASSERT_EQ(run["rows"].size(), rows ? 6u : 0u) << run.dump(2);
    for (const auto& row : run["rows"]) {
      const std::string op = row["op"];
      const size_t bytes = row["bytes"];
      // Whole-buffer sizes: reduce_scatter / all_gather round down to n equal shards of fp32.
      const size_t asked = bytes >= 65536 - 4 * 3 ? 65536 : 4096;
      EXPECT_EQ(bytes, op == "all_reduce" ? asked : asked / 4 / n * n * 4) << op;
      const double t = row["time_us"].get<double>() * 1e-6, algbw = row["algbw_GBps"], busbw = row["busbw_GBps"];
      EXPECT_NEAR(algbw, bytes / t / 1e9, 1e-9 + 1e-6 * algbw) << op;
      const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : (n - 1.0) / n;
      EXPECT_NEAR(busbw, algbw * factor, 1e-12 + 1e-9 * busbw) << op;
    }
  }
  EXPECT_EQ(seen, (std::set<std::pair<std::string, int>>{{"file", 3}, {"file", 4}, {"redis", 3}, {"redis", 4}}));

  CmdResult bad = run_cmd(kBin + " bench comm --ranks 2 --sizes 4X");
  EXPECT_NE(bad.code, 0) << bad.output;
  EXPECT_NE(bad.output.find("4X"), std::string::npos) << bad.output;
}

}  // namespace
