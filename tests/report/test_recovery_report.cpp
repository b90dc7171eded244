// test_recovery_report: the recovery accounting of report/recovery_report.h from hand-written files:
// restore_summary folds the ranks' restore_rank<R>.json of one attempt (older files left out by
// their time, the path "memory" / "storage" / "mixed", the slowest rank's restore and start-up, why
// memory was skipped), and recovery_table turns the driver's events into one row per fault with the
// differences of the events' monotonic times; an unreadable file is named, not thrown.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "report/recovery_report.h"

namespace {

using namespace ms;
namespace fs = std::filesystem;
using nlohmann::json;

void write(const fs::path& p, const json& j) { std::ofstream(p) << j.dump(); }

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(RecoveryReport, RestoreSummaryFoldsOneAttempt) {
  const std::string dir = ms::testing::make_temp_dir("recovery_report");
  write(fs::path(dir) / "restore_rank3.json", {{"path", "storage"}, {"seconds", 9.0}});  // an earlier attempt's
  // A file's time comes from the kernel's coarse clock (a tick, up to 10 ms, behind the system
  // clock): 50 ms of slack on each side of `since`.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double since = unix_now() - 0.05;
  write(fs::path(dir) / "restore_rank0.json",
        {{"path", "memory"}, {"source", "local"}, {"seconds", 0.5}, {"step", 7}, {"load_seconds", 0.3},
         {"startup", {{"total", 1.5}, {"world", 0.2}}}});
  write(fs::path(dir) / "restore_rank1.json",
        {{"path", "memory"}, {"source", "peer 0"}, {"seconds", 0.8}, {"step", 7}, {"transfer_seconds", 0.6},
         {"bytes_received", 1000.0}, {"startup", {{"total", 1.1}}}});
  json s = restore_summary(dir, 4, since);
  EXPECT_EQ(s["ranks"], 2) << s.dump();
  EXPECT_EQ(s["path"], "memory");
  EXPECT_EQ(s["memory_local"], 1);
  EXPECT_EQ(s["memory_peer"], 1);
  EXPECT_EQ(s["storage"], 0);
  EXPECT_DOUBLE_EQ(s["restore_s"].get<double>(), 0.8);
  EXPECT_EQ(s["slowest_rank"], 1);
  EXPECT_DOUBLE_EQ(s["slowest_phases"]["transfer_seconds"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(s["slowest_startup"]["total"].get<double>(), 1.5) << "rank 0 was slowest to start";
  EXPECT_DOUBLE_EQ(s["bytes_received"].get<double>(), 1000.0);
  // With the older file counted: mixed.
  s = restore_summary(dir, 4, 0);
  EXPECT_EQ(s["path"], "mixed");
  EXPECT_EQ(s["storage"], 1);
  // Storage after memory was looked at: the reason travels.
  write(fs::path(dir) / "restore_rank2.json",
        {{"path", "storage"}, {"seconds", 0.1}, {"memory_skipped", "no step of rank 1's state ..."}});
  s = restore_summary(dir, 4, 0);
  EXPECT_EQ(s["memory_skipped"], "no step of rank 1's state ...");
  // A malformed file is reported, not thrown.
  std::ofstream(fs::path(dir) / "restore_rank1.json") << "{not json";
  s = restore_summary(dir, 4, 0);
  ASSERT_TRUE(s.contains("errors"));
  EXPECT_NE(s["errors"][0].get<std::string>().find("restore_rank1.json"), std::string::npos);
  EXPECT_EQ(restore_summary(dir + "/none", 4)["ranks"], 0);
  fs::remove_all(dir);
}

TEST(RecoveryReport, TableHasOneRowPerFault) {
  const std::string dir = ms::testing::make_temp_dir("recovery_table");
  std::ofstream f(fs::path(dir) / "events.jsonl");
  const json ev[] = {
      {{"event", "attempt_start"}, {"mono", 0.1}},
      {{"event", "fault_detected"}, {"kind", "crash"}, {"mono", 10.0}},
      {{"event", "ranks_stopped"}, {"mono", 10.25}},
      {{"event", "selfcheck_done"}, {"mono", 11.0}},
      {{"event", "restart"}, {"mono", 11.0}},
      {{"event", "resumed"}, {"mono", 13.5}, {"recovery_s", 3.5}, {"steps_repeated", 1}, {"warm_ranks", 3}},
      {{"event", "recovery"}, {"path", "memory"}, {"memory_local", 2}, {"memory_peer", 2}, {"storage", 0},
       {"restore_s", 0.4}, {"mono", 13.5}},
      {{"event", "fault_detected"}, {"kind", "heartbeat"}, {"mono", 20.0}},
      {{"event", "ranks_stopped"}, {"mono", 21.0}},
  };
  for (const json& e : ev) f << e.dump() << "\n";
  f << "{\"event\":\"torn";  // a killed driver's last line
  f.close();
  const std::string t = recovery_table(dir);
  EXPECT_NE(t.find("| 1 | crash | 0.25 s | 0.75 s | 2.50 s | 3 | memory (2 own, 2 peer, 0 storage) | 0.40 s | 1 | 3.50 s |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("| 2 | heartbeat | 1.00 s | - | - | - | - | - | - | - |"), std::string::npos) << t;
  std::ofstream(fs::path(dir) / "events.jsonl") << json{{"event", "job_end"}}.dump() << "\n";
  EXPECT_NE(recovery_table(dir).find("no fault, no recovery"), std::string::npos);
  EXPECT_NE(recovery_table(dir + "/none").find("cannot be read"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
