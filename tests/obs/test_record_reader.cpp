// test_record_reader: the record files of a synthetic run read back exactly (every rank, every record
// kind, the step `ms` maps); a last line without its newline ignored; a missing rank file listed;
// malformed lines named by file, line, field and reason; the incremental tail returns only new
// complete lines, picks up new files and restarts replaced ones (shorter, another inode, or rewritten
// in place, each already longer than the old offset); the straggler table's layout.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "obs/record_reader.h"
#include "report/synthetic_run.h"

namespace {

using namespace ms;
using namespace ms::testing;
namespace fs = std::filesystem;

class RecordReaderTest : public TempDirTest {
 protected:
  const char* tag() const override { return "ms_records"; }
  std::string rank_file(int r) const { return path(fmt::format("records/rank-{:05d}.jsonl", r)); }
  void append(const std::string& file, const std::string& text) {
    std::ofstream f(file, std::ios::app | std::ios::binary);
    f << text;
  }
  const std::string header0 =
      R"({"type":"header","format":1,"rank":0,"world":2,"coord":{"tp":0,"dp":0,"pp":0},"order":"tp-dp-pp",)"
      R"("shape":{"tp":1,"dp":1,"pp":2},"groups":{"pp[dp=0,tp=0]":[0,1]}})";
  const std::string span0 = R"({"type":"span","seg":"forward","name":"forward 0.0","step":0,"mb":0,"chunk":0,"t0":10,"t1":20})";
};

TEST_F(RecordReaderTest, ReadsEveryRecordOfEveryRank) {
  SyntheticRun cfg;
  const SyntheticCounts n = write_synthetic_run(dir_.string(), cfg);
  const RunRecords run = read_run_records(dir_.string());  // the run folder; records/ found
  EXPECT_EQ(run.records_dir, path("records"));
  EXPECT_EQ(run.world, 8);
  EXPECT_TRUE(run.missing.empty());
  ASSERT_EQ(run.ranks.size(), 8u);
  for (const RankRecords& r : run.ranks) {
    ASSERT_TRUE(r.has_header) << r.path;
    EXPECT_EQ(r.header.rank, r.rank);
    EXPECT_EQ(r.rank, cfg.rank_of(r.header.coord.tp, r.header.coord.dp, r.header.coord.pp));
    EXPECT_EQ(r.header.shape.tp, 2);
    EXPECT_EQ(r.header.groups.size(), 3u);
    EXPECT_EQ(r.header.offset_ns, 1000 * r.rank);
    EXPECT_EQ(r.spans.size(), n.spans.at(r.rank));
    EXPECT_EQ(r.comms.size(), n.comms.at(r.rank));
    EXPECT_EQ(r.steps.size(), n.steps.at(r.rank));
    EXPECT_EQ(r.events.size(), n.events.at(r.rank));
    EXPECT_EQ(r.clocks.size(), 1u);
    const RecordedStep& s = r.steps.at(3);
    EXPECT_EQ(s.step, 3);
    EXPECT_EQ(s.loss.has_value(), r.header.coord.pp == 1);
    EXPECT_NEAR(s.ms.at("forward"), 4.0, 1e-9);  // 2 micro-batches x 2 ms, no noise
    EXPECT_NEAR(s.mfu, 0.1, 1e-12);
    if (r.rank == 0) {
      EXPECT_NEAR(s.mfu_gemm, 0.3, 1e-12);
    } else {
      EXPECT_TRUE(std::isnan(s.mfu_gemm)) << "null: the rank does not know it";
    }
    EXPECT_NEAR(s.ms.at("backward"), 8.0, 1e-9);
    EXPECT_EQ(r.spans[1].name, "forward 0.0");
    EXPECT_EQ(r.spans[1].seg, "forward");
    EXPECT_EQ(r.spans[1].mb, 0);
  }
  EXPECT_EQ(run.find(5)->label(), "rank 5 (pp=1 dp=0 tp=1)");
  EXPECT_EQ(read_run_records(path("records")).ranks.size(), 8u);  // the records folder itself
}

TEST_F(RecordReaderTest, IgnoresAnIncompleteLastLineAndListsMissingRanks) {
  SyntheticRun cfg;
  cfg.dp = 4, cfg.tp = 1, cfg.pp = 1;
  const SyntheticCounts n = write_synthetic_run(dir_.string(), cfg);
  fs::remove(rank_file(3));
  append(rank_file(1), R"({"type":"span","seg":"forward","name":"forw)");  // being written
  const RunRecords run = read_run_records(dir_.string());
  EXPECT_EQ(run.world, 4);
  EXPECT_EQ(run.missing, std::vector<int>{3});
  ASSERT_EQ(run.ranks.size(), 3u);
  EXPECT_EQ(run.find(1)->spans.size(), n.spans.at(1));
  EXPECT_EQ(run.find(3), nullptr);
}

TEST_F(RecordReaderTest, MalformedLinesAreNamedByFileLineAndField) {
  const std::string f = rank_file(0);
  auto expect_bad = [&](const std::string& line2, const std::vector<std::string>& parts) {
    spit(f, header0 + "\n" + line2 + "\n");
    std::vector<std::string> all = parts;
    all.push_back(f + ":2");
    expect_error([&] { read_run_records(dir_.string()); }, all);
  };
  expect_bad("this is not json", {"not a JSON line"});
  expect_bad(R"({"type":"span","seg":"forward","name":"f","step":0,"t1":5})", {"field 't0' is missing"});
  expect_bad(R"({"type":"span","seg":"forward","name":"f","step":"x","t0":1,"t1":5})",
             {"field 'step' is not an integer"});
  expect_bad(R"({"type":"span","seg":"forward","name":"f","step":0,"t0":9,"t1":5})", {"'t1' = 5 is before 't0' = 9"});
  expect_bad(R"({"type":"step","step":0,"t0":1,"t1":5,"ms":{"forward":"slow"}})", {"field 'ms.forward' is not a number"});
  expect_bad(R"({"type":"step","step":0,"t0":1,"t1":5})", {"field 'ms' is missing"});
  expect_bad(R"({"seg":"forward"})", {"field 'type' is missing"});
  expect_bad(R"([1,2])", {"must be a JSON object"});
  // Before the header, another rank's header, another format.
  spit(f, span0 + "\n");
  expect_error([&] { read_run_records(dir_.string()); }, {f + ":1", "before the header"});
  spit(f, R"({"type":"header","format":1,"rank":1,"world":2,"coord":{"tp":0,"dp":0,"pp":1}})" "\n");
  expect_error([&] { read_run_records(dir_.string()); }, {f + ":1", "header of rank 1 in the file of rank 0"});
  spit(f, R"({"type":"header","format":2,"rank":0,"world":2,"coord":{"tp":0,"dp":0,"pp":0}})" "\n");
  expect_error([&] { read_run_records(dir_.string()); }, {f + ":1", "format 1 only"});
  // No folder, no files.
  expect_error([&] { read_run_records(path("nope")); }, {path("nope"), "no such folder"});
  fs::remove(f);
  expect_error([&] { read_run_records(dir_.string()); }, {"no rank-RRRRR.jsonl"});
  // Unknown record types and blank lines are skipped.
  spit(f, header0 + "\n\n" + R"({"type":"future","x":1})" + "\n" + span0 + "\n");
  EXPECT_EQ(read_run_records(dir_.string()).ranks.at(0).spans.size(), 1u);
}

TEST_F(RecordReaderTest, TailReturnsOnlyNewCompleteLines) {
  RecordTail tail(dir_.string());
  EXPECT_TRUE(tail.poll().ranks.empty());  // no records folder yet
  fs::create_directories(path("records"));
  const std::string f0 = rank_file(0), f1 = rank_file(1);
  spit(f0, header0 + "\n" + span0 + "\n" + span0.substr(0, 20));
  RunRecords a = tail.poll();
  EXPECT_EQ(tail.records_dir(), path("records"));
  ASSERT_EQ(a.ranks.size(), 1u);
  EXPECT_TRUE(a.ranks[0].has_header);
  EXPECT_EQ(a.ranks[0].spans.size(), 1u);
  EXPECT_EQ(a.world, 2);
  EXPECT_EQ(a.missing, std::vector<int>{1});
  // Nothing new: rank 0 not listed. The partial line completed: one span, header repeated.
  EXPECT_TRUE(tail.poll().ranks.empty());
  append(f0, span0.substr(20) + "\n");
  RunRecords b = tail.poll();
  ASSERT_EQ(b.ranks.size(), 1u);
  EXPECT_EQ(b.ranks[0].spans.size(), 1u);
  EXPECT_TRUE(b.ranks[0].has_header);
  EXPECT_EQ(b.ranks[0].header.world, 2);
  // A new rank file appears; a malformed line fails every poll until fixed, offsets stay before it.
  spit(f1, R"({"type":"header","format":1,"rank":1,"world":2,"coord":{"tp":0,"dp":0,"pp":1},"host":"a-long-host-name"})" "\n");
  RunRecords c = tail.poll();
  ASSERT_EQ(c.ranks.size(), 1u);
  EXPECT_EQ(c.ranks[0].rank, 1);
  EXPECT_TRUE(c.missing.empty());
  append(f1, "garbage\n");
  expect_error([&] { tail.poll(); }, {f1 + ":2", "not a JSON line"});
  expect_error([&] { tail.poll(); }, {f1 + ":2"});
  // Replaced by a shorter file: read anew from its start.
  spit(f1, R"({"type":"header","format":1,"rank":1,"world":2,"coord":{"tp":0,"dp":0,"pp":1}})" "\n");
  RunRecords d = tail.poll();
  ASSERT_EQ(d.ranks.size(), 1u);
  EXPECT_TRUE(d.ranks[0].has_header);
  // Archived and replaced by a new file that is already longer than the old offset (a restarted
  // rank writing fast): another inode, read anew from its start, never from the old offset.
  fs::rename(f1, path("records/old-rank-1"));
  spit(f1, R"({"type":"header","format":1,"rank":1,"world":2,"coord":{"tp":0,"dp":0,"pp":1},"host":"another-host"})"
           "\n" + std::string(R"({"type":"span","seg":"forward","step":1,"t0":1,"t1":2})") + "\n");
  RunRecords e = tail.poll();
  ASSERT_EQ(e.ranks.size(), 1u);
  EXPECT_TRUE(e.ranks[0].has_header);
  EXPECT_EQ(e.ranks[0].spans.size(), 1u);
  // Rewritten in place (truncated by a restarted rank, same inode) and already longer than before:
  // its header differs, so it is read anew.
  spit(f1, R"({"type":"header","format":1,"rank":1,"world":2,"coord":{"tp":0,"dp":0,"pp":1},"host":"third-host-x"})"
           "\n" + std::string(R"({"type":"span","seg":"forward","step":1,"t0":1,"t1":2})") + "\n" +
           std::string(R"({"type":"span","seg":"forward","step":2,"t0":3,"t1":4})") + "\n");
  RunRecords g = tail.poll();
  ASSERT_EQ(g.ranks.size(), 1u);
  EXPECT_EQ(g.ranks[0].header.host, "third-host-x");
  EXPECT_EQ(g.ranks[0].spans.size(), 2u);
  // append_records accumulates polls into the whole run.
  RunRecords all;
  append_records(all, std::move(a));
  append_records(all, std::move(b));
  append_records(all, std::move(c));
  ASSERT_EQ(all.ranks.size(), 2u);
  EXPECT_EQ(all.find(0)->spans.size(), 2u);
}

TEST_F(RecordReaderTest, StepSegmentTable) {
  SyntheticRun cfg;
  cfg.dp = 2, cfg.tp = 1, cfg.pp = 2, cfg.steps = 6;
  write_synthetic_run(dir_.string(), cfg);
  const RunRecords run = read_run_records(dir_.string());
  const SegmentTable t = step_segment_table(run, {"forward", "nothing", kStepTimeSegment}, 4);
  EXPECT_EQ(t.ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(t.peer_class, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(t.steps, (std::vector<int>{2, 3, 4, 5}));
  for (size_t r = 0; r < 4; r++)
    for (size_t c = 0; c < 4; c++) {
      EXPECT_NEAR(t.at(r, c, 0), 4.0, 1e-9);
      EXPECT_TRUE(std::isnan(t.at(r, c, 1)));
      const RecordedStep& s = run.ranks[r].steps[c + 2];
      EXPECT_NEAR(t.at(r, c, 2), (s.t1 - s.t0) / 1e6, 1e-9);
    }
  EXPECT_EQ(step_segment_table(run, {"forward"}, 0).steps.size(), 6u);
}

TEST(RecordCoords, RankToCoordinates) {
  const RankCoord shape{2, 2, 2};
  const RankCoord c = coord_of_rank(5, shape, "tp-dp-pp");
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.dp, 0);
  EXPECT_EQ(c.pp, 1);
  const RankCoord d = coord_of_rank(5, RankCoord{2, 3, 2}, "pp-tp-dp");  // pp fastest, then tp, then dp
  EXPECT_EQ(d.pp, 1);
  EXPECT_EQ(d.tp, 0);
  EXPECT_EQ(d.dp, 1);
  EXPECT_THROW(coord_of_rank(0, shape, "tp-tp-pp"), ms::Error);
}

}  // namespace
