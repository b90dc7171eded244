// megascale diagnose (report/diagnose.h) on synthetic hang dumps of a 2 x 2 (tp x dp) world, order
// tp-dp-pp: a rank that left no dump at the end of a wait chain is the one culprit (the rank waiting
// elsewhere in between is not); a rank that dumped but never entered the collective; a send/recv
// whose other end never posted; a rank that entered only after the waiters' deadline; a stopped
// (frozen) rank; nobody missing (no culprit, said so); malformed dumps named by file and field; the
// run-folder reader and the CLI's exit code.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "report/diagnose.h"

namespace ms {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const json kGroups = {{"world", {0, 1, 2, 3}}, {"tp[dp=0,pp=0]", {0, 1}}, {"tp[dp=1,pp=0]", {2, 3}},
                      {"dp[tp=0,pp=0]", {0, 2}}, {"dp[tp=1,pp=0]", {1, 3}}};

json ring_op(const std::string& op, const std::string& group, uint64_t seq, const std::string& state, int64_t t0 = 100,
             int64_t deadline = 1000, int peer = -1, int peer_world = -1) {
  return {{"op", op}, {"group", group}, {"seq", seq}, {"state", state}, {"status", state == "running" ? "running" : state},
          {"peer", peer}, {"peer_world", peer_world}, {"t0", t0}, {"t1", state == "running" ? 0 : t0 + 1},
          {"deadline", deadline}};
}

json dump(int rank, json ring, const std::string& kind = "comm_error") {
  return {{"format", 1}, {"kind", kind}, {"reason", "test"}, {"rank", rank}, {"world", 4},
          {"coord", {{"tp", rank % 2}, {"dp", rank / 2}, {"pp", 0}}}, {"shape", {{"tp", 2}, {"dp", 2}, {"pp", 1}}},
          {"order", "tp-dp-pp"}, {"groups", kGroups}, {"frozen_ns", 0}, {"ring", std::move(ring)},
          {"stuck", json::array()}, {"segment", nullptr}};
}

Diagnosis run(const std::vector<json>& dumps) {
  std::vector<std::string> names;
  for (const json& d : dumps) names.push_back("rank-" + (d["rank"].is_number() ? d["rank"].dump() : "x") + ".json");
  return diagnose_dumps(dumps, names, {});
}

std::vector<int> culprit_ranks(const Diagnosis& d) {
  std::vector<int> r;
  for (const Culprit& c : d.culprits) r.push_back(c.rank);
  return r;
}

TEST(Diagnose, TheRankWithoutADumpAtTheEndOfAWaitChainIsTheCulprit) {
  // Rank 3 stopped: rank 1 waits for it in dp[tp=1] seq 5; rank 0 waits for rank 1 in tp[dp=0] seq 9 (rank 1
  // never got there: it is stuck in the dp op); rank 2 waits for rank 3 in tp[dp=1] seq 9.
  const Diagnosis d = run({
      dump(0, {ring_op("all_reduce", "tp[dp=0,pp=0]", 8, "ok"), ring_op("all_reduce", "tp[dp=0,pp=0]", 9, "running")}),
      dump(1, {ring_op("all_reduce", "tp[dp=0,pp=0]", 8, "ok"), ring_op("reduce_scatter", "dp[tp=1,pp=0]", 5, "running")}),
      dump(2, {ring_op("all_reduce", "tp[dp=1,pp=0]", 9, "running")}),
  });
  EXPECT_EQ(d.world, 4);
  EXPECT_EQ(d.no_dump, std::vector<int>{3});
  ASSERT_EQ(culprit_ranks(d), std::vector<int>{3}) << format_diagnosis(d);
  EXPECT_EQ(d.culprits[0].coord.tp, 1);
  EXPECT_EQ(d.culprits[0].coord.dp, 1);
  EXPECT_EQ(d.culprits[0].coord.pp, 0);
  const std::string text = format_diagnosis(d);
  EXPECT_NE(text.find("culprit: rank 3 (tp=1,dp=1,pp=0): left no dump"), std::string::npos) << text;
  EXPECT_NE(text.find("waiting: all_reduce on 'tp[dp=0,pp=0]' seq 9"), std::string::npos) << text;
  EXPECT_EQ(text.find("culprit: rank 1"), std::string::npos) << "rank 1 waits itself:\n" << text;
}

TEST(Diagnose, ARankThatDumpedButNeverEnteredIsNamed) {
  // Rank 2 sleeps in compute (its dump: the last dp op is seq 4, nothing running); rank 0 waits in seq 5.
  json late = dump(2, {ring_op("all_reduce", "dp[tp=0,pp=0]", 4, "ok")}, "signal");
  late["segment"] = {{"name", "forward 0.0"}};
  const Diagnosis d = run({dump(0, {ring_op("all_reduce", "dp[tp=0,pp=0]", 5, "running")}), dump(1, json::array()), late,
                           dump(3, json::array())});
  ASSERT_EQ(culprit_ranks(d), std::vector<int>{2}) << format_diagnosis(d);
  EXPECT_NE(d.culprits[0].why.find("never entered all_reduce on 'dp[tp=0,pp=0]' seq 5"), std::string::npos)
      << d.culprits[0].why;
  EXPECT_NE(d.culprits[0].why.find("seq 4"), std::string::npos) << d.culprits[0].why;
  EXPECT_NE(d.culprits[0].why.find("forward 0.0"), std::string::npos) << d.culprits[0].why;
}

TEST(Diagnose, AReceiveWhoseSenderNeverPostedNamesTheSender) {
  // Rank 0 waits in a recv from group rank 1 of dp[tp=0] (world rank 2); rank 2's last send to it is seq 2.
  const Diagnosis d = run({
      dump(0, {ring_op("recv", "dp[tp=0,pp=0]", 3, "running", 100, 1000, 1, 2)}),
      dump(1, json::array()),
      dump(2, {ring_op("send", "dp[tp=0,pp=0]", 2, "ok", 50, 900, 0, 0)}),
      dump(3, json::array()),
  });
  ASSERT_EQ(culprit_ranks(d), std::vector<int>{2}) << format_diagnosis(d);
  // The same with the matching send posted: nobody missing.
  const Diagnosis ok = run({
      dump(0, {ring_op("recv", "dp[tp=0,pp=0]", 3, "running", 100, 1000, 1, 2)}),
      dump(1, json::array()),
      dump(2, {ring_op("send", "dp[tp=0,pp=0]", 3, "running", 50, 900, 0, 0)}),
      dump(3, json::array()),
  });
  EXPECT_TRUE(ok.culprits.empty()) << format_diagnosis(ok);
}

TEST(Diagnose, ARankThatEnteredAfterTheDeadlineIsLate) {
  // Everyone is in world seq 7, but rank 1 started it at t = 5000, after the others' deadline (1000).
  const Diagnosis d = run({
      dump(0, {ring_op("all_reduce", "world", 7, "running")}),
      dump(1, {ring_op("all_reduce", "world", 7, "running", 5000, 9000)}, "signal"),
      dump(2, {ring_op("all_reduce", "world", 7, "running")}),
      dump(3, {ring_op("all_reduce", "world", 7, "running")}),
  });
  ASSERT_EQ(culprit_ranks(d), std::vector<int>{1}) << format_diagnosis(d);
  EXPECT_NE(d.culprits[0].why.find("after the waiters' deadline"), std::string::npos) << d.culprits[0].why;
}

TEST(Diagnose, AFrozenRankIsNamedAndNobodyMissingIsSaid) {
  std::vector<json> all;
  for (int r = 0; r < 4; r++) all.push_back(dump(r, {ring_op("all_reduce", "world", 7, "running")}));
  const Diagnosis none = run(all);
  EXPECT_TRUE(none.culprits.empty()) << format_diagnosis(none);
  ASSERT_FALSE(none.notes.empty());
  EXPECT_NE(none.notes.back().find("no rank is missing"), std::string::npos) << none.notes.back();
  all[3]["frozen_ns"] = 6'000'000'000;  // rank 3 was stopped inside the collective
  const Diagnosis d = run(all);
  ASSERT_EQ(culprit_ranks(d), std::vector<int>{3}) << format_diagnosis(d);
  EXPECT_NE(d.culprits[0].why.find("not scheduled for 6.0 s"), std::string::npos) << d.culprits[0].why;
}

TEST(Diagnose, AFrozenRankOutranksABusyMissingOne) {
  // Rank 1 was stopped before world seq 7 (frozen); rank 3 is busy elsewhere (no wait in its dump)
  // and has not entered seq 7 either: only rank 1 is named, rank 3 goes into a note. Without the
  // frozen rank, rank 3 is a culprit.
  std::vector<json> all = {dump(0, {ring_op("all_reduce", "world", 7, "running")}),
                           dump(1, {ring_op("all_reduce", "world", 6, "ok")}),
                           dump(2, {ring_op("all_reduce", "world", 7, "running")}),
                           dump(3, {ring_op("all_reduce", "world", 6, "ok")})};
  const Diagnosis both = run(all);
  ASSERT_EQ(culprit_ranks(both), (std::vector<int>{1, 3})) << format_diagnosis(both);
  all[1]["frozen_ns"] = 4'000'000'000;
  const Diagnosis d = run(all);
  ASSERT_EQ(culprit_ranks(d), std::vector<int>{1}) << format_diagnosis(d);
  ASSERT_FALSE(d.notes.empty());
  EXPECT_NE(d.notes.back().find("rank 3 also held up"), std::string::npos) << d.notes.back();
}

TEST(Diagnose, MalformedDumpsAreNamedByFileAndField) {
  json no_ring = dump(0, json::array());
  no_ring.erase("ring");
  EXPECT_THROW(
      {
        try {
          run({no_ring});
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("rank-0.json: field 'ring'"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  json bad_rank = dump(0, json::array());
  bad_rank["rank"] = "zero";
  try {
    run({bad_rank});
    ADD_FAILURE() << "a string rank was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'rank' is not an integer"), std::string::npos) << e.what();
  }
  json newer = dump(1, json::array());
  newer["format"] = 2;
  EXPECT_THROW(run({newer}), Error);
  EXPECT_THROW(run({dump(1, json::array()), dump(1, json::array())}), Error);  // two dumps of one rank
}

TEST(Diagnose, ReadsARunFolderAndTheCliSaysWhetherItNamedCulprits) {
  const std::string dir = testing::make_temp_dir("diagnose");
  fs::create_directories(dir + "/hang");
  fs::create_directories(dir + "/records");
  // Rank 0's dump alone, without the layout: rank 1's coordinates come from its record header.
  json d0 = dump(0, {ring_op("all_reduce", "tp[dp=0,pp=0]", 2, "running")});
  d0.erase("shape");
  std::ofstream(dir + "/hang/rank-00000.json") << d0.dump(1);
  std::ofstream(dir + "/records/rank-00001.jsonl")
      << json({{"type", "header"}, {"rank", 1}, {"world", 4}, {"coord", {{"tp", 1}, {"dp", 0}, {"pp", 0}}}}).dump()
      << "\n";
  const Diagnosis d = diagnose_run(dir);
  ASSERT_EQ(culprit_ranks(d), std::vector<int>{1}) << format_diagnosis(d);
  EXPECT_EQ(d.culprits[0].coord.tp, 1);
  const testing::CmdResult r = testing::run_cmd(std::string(MEGASCALE_BINARY) + " diagnose " + dir);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("culprit: rank 1 (tp=1,dp=0,pp=0)"), std::string::npos) << r.output;
  // Everybody in the collective: no culprit, exit code 1.
  for (int k = 1; k < 4; k++)
    std::ofstream(dir + "/hang/rank-0000" + std::to_string(k) + ".json")
        << dump(k, {ring_op("all_reduce", k < 2 ? "tp[dp=0,pp=0]" : "world", 2, "running")}).dump();
  const testing::CmdResult r2 = testing::run_cmd(std::string(MEGASCALE_BINARY) + " diagnose " + dir);
  EXPECT_EQ(r2.code, 1) << r2.output;
  // No dump at all: a named error.
  fs::remove_all(dir + "/hang");
  const testing::CmdResult r3 = testing::run_cmd(std::string(MEGASCALE_BINARY) + " diagnose " + dir);
  EXPECT_NE(r3.code, 0);
  EXPECT_NE(r3.output.find("no hang dump"), std::string::npos) << r3.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ms
