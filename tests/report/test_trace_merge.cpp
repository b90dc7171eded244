// test_trace_merge: the merged Chrome trace of synthetic runs, checked by an independent parser
// (Debian's /usr/bin/python3 json module): valid JSON; every rank (missing ones too) is a process
// with its coordinates; slices on one track nest properly; every pipeline send has exactly one flow
// to its recv (bound inside both slices); overlapping spans spill to extra tracks, none dropped;
// `megascale trace` writes the same. Also a real 2-stage x 2-tensor run under `megascale launch`.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/layout_runs.h"  // LayoutRuns, launch
#include "common/test_util.h"
#include "obs/record_reader.h"
#include "report/synthetic_run.h"
#include "report/trace_merge.h"

namespace {

using namespace ms;
using namespace ms::testing;
namespace fs = std::filesystem;

// Reads a merged trace with Python's json module and checks its structure; prints one JSON summary
// line ({"processes": ..., "sends": ..., "flows": ..., "slices": ...}) or exits 1 naming the problem.
const char* kPyCheck = R"PY(
import json, sys, collections
doc = json.load(open(sys.argv[1]))
ev = doc["traceEvents"]
def fail(msg):
    print("FAIL: " + msg); sys.exit(1)
procs = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
sorts = {e["pid"]: e["args"]["sort_index"] for e in ev if e.get("ph") == "M" and e["name"] == "process_sort_index"}
if set(procs) != set(sorts): fail("process without sort index")
tracks = collections.defaultdict(list)
for e in ev:
    if e.get("ph") == "X":
        if e["dur"] < 0: fail("negative duration %r" % e)
        if e["pid"] not in procs: fail("slice of an unnamed process %r" % e)
        tracks[(e["pid"], e["tid"])].append(e)
EPS = 1e-3
for key, xs in tracks.items():
    xs.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack = []
    for e in xs:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + EPS: stack.pop()
        if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + EPS:
            fail("track %r: %s [%f,%f] partly overlaps %s [%f,%f]" % (key, e["name"], e["ts"], e["ts"] + e["dur"],
                 stack[-1]["name"], stack[-1]["ts"], stack[-1]["ts"] + stack[-1]["dur"]))
        stack.append(e)
def enclosing(pid, tid, ts, name):
    hits = [e for e in tracks[(pid, tid)] if e["ts"] - EPS <= ts <= e["ts"] + e["dur"] + EPS]
    if len(hits) != 1: fail("flow at %r on %r binds to %d slices" % (ts, (pid, tid), len(hits)))
    if hits[0]["name"] != name: fail("flow at %r binds to a %s, not a %s" % (ts, hits[0]["name"], name))
    return id(hits[0])
starts = collections.Counter(); ends = collections.Counter(); bound_sends = collections.Counter()
for e in ev:
    if e.get("ph") == "s":
        starts[e["id"]] += 1; bound_sends[enclosing(e["pid"], e["tid"], e["ts"], "send")] += 1
        a = e["args"]
        if a["src"] != e["pid"]: fail("flow start not on its sender")
    elif e.get("ph") == "f":
        ends[e["id"]] += 1; enclosing(e["pid"], e["tid"], e["ts"], "recv")
        if e.get("bp") != "e": fail("flow end not bound to the enclosing slice")
if starts != ends or any(v != 1 for v in starts.values()): fail("flow ids do not pair one to one")
sends = [e for xs in tracks.values() for e in xs if e["name"] == "send"]
if any(v != 1 for v in bound_sends.values()) or len(bound_sends) != len(sends):
    fail("%d sends, %d bound to exactly one flow" % (len(sends), len(bound_sends)))
print(json.dumps({"processes": sorted(procs), "names": procs, "sorts": sorts, "sends": len(sends),
                  "flows": len(starts), "slices": sum(len(x) for x in tracks.values()),
                  "instants": sum(1 for e in ev if e.get("ph") == "i")}))
)PY";

class TraceMergeTest : public TempDirTest {
 protected:
  const char* tag() const override { return "ms_trace"; }
  // Runs the checker on a trace file; the parsed summary (fails the test on a problem).
  nlohmann::json check(const std::string& trace) {
    spit(path("check.py"), kPyCheck);
    const CmdResult r = run_cmd("/usr/bin/python3 " + path("check.py") + " " + trace);
    EXPECT_EQ(r.code, 0) << r.output;
    if (r.code != 0) return {};
    return nlohmann::json::parse(r.output.substr(r.output.rfind('{', r.output.find("\"processes\""))));
  }
};

TEST_F(TraceMergeTest, EveryRankAProcessEverySendOneFlow) {
  SyntheticRun cfg;  // 2 x 2 x 2
  cfg.noise = 0.05;
  const SyntheticCounts n = write_synthetic_run(dir_.string(), cfg);
  const RunRecords run = read_run_records(dir_.string());
  const TraceStats st = write_merged_trace(run, path("trace.json"));
  EXPECT_EQ(st.processes, 8u);
  EXPECT_EQ(st.flows, n.sends);
  EXPECT_EQ(st.unmatched_sends, 0u);
  EXPECT_EQ(st.unmatched_recvs, 0u);
  EXPECT_EQ(st.overflow_tracks, 0u);
  const nlohmann::json s = check(path("trace.json"));
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["processes"], nlohmann::json({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(s["sends"].get<size_t>(), n.sends);
  EXPECT_EQ(s["flows"].get<size_t>(), n.sends);
  EXPECT_GT(n.sends, 0u);
  EXPECT_EQ(s["slices"].get<size_t>(), st.slices);
  EXPECT_EQ(s["names"]["5"], "rank 5 (pp=1 dp=0 tp=1)");
  // Sorted by (pp, dp, tp): rank 2 (pp=0 dp=1 tp=0) before rank 4 (pp=1 dp=0 tp=0).
  EXPECT_LT(s["sorts"]["2"].get<int>(), s["sorts"]["4"].get<int>());
  EXPECT_LT(s["sorts"]["1"].get<int>(), s["sorts"]["2"].get<int>());
  size_t events = 0, spans = 0, comms = 0, steps = 0;
  for (const auto& [r, k] : n.events) events += k;
  for (const auto& [r, k] : n.spans) spans += k;
  for (const auto& [r, k] : n.comms) comms += k;
  for (const auto& [r, k] : n.steps) steps += k;
  EXPECT_EQ(s["instants"].get<size_t>(), events);
  EXPECT_EQ(st.slices, spans + comms + steps);
}

TEST_F(TraceMergeTest, MissingRanksAndOverlappingSpans) {
  SyntheticRun cfg;
  cfg.dp = 1, cfg.tp = 2, cfg.pp = 2, cfg.overlap = true;
  const SyntheticCounts n = write_synthetic_run(dir_.string(), cfg);
  fs::remove(path("records/rank-00003.jsonl"));  // pp=1 tp=1: its partner's sends lose their recv
  const RunRecords run = read_run_records(dir_.string());
  const TraceStats st = write_merged_trace(run, path("trace.json"));
  EXPECT_EQ(st.processes, 4u);
  EXPECT_GT(st.overflow_tracks, 0u);
  EXPECT_GT(st.unmatched_sends, 0u);
  EXPECT_EQ(st.flows + st.unmatched_sends + st.unmatched_recvs, n.sends);
  size_t spans = 0, comms = 0, steps = 0;
  for (int r : {0, 1, 2}) spans += n.spans.at(r), comms += n.comms.at(r), steps += n.steps.at(r);
  EXPECT_EQ(st.slices, spans + comms + steps);  // nothing dropped
  // The checker's flow test needs every send paired: check nesting and processes on the full run.
  write_synthetic_run(path("full"), cfg);
  write_merged_trace(read_run_records(path("full")), path("full.json"));
  const nlohmann::json s = check(path("full.json"));
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["processes"].size(), 4u);
  // The missing rank is still a process, named as missing.
  const nlohmann::json doc = merge_trace(run);
  bool named = false;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == 3)
      named = e["args"]["name"].get<std::string>().find("rank 3 (pp=1 dp=0 tp=1) missing") == 0;
  EXPECT_TRUE(named);
}

TEST_F(TraceMergeTest, CommandWritesTheTrace) {
  SyntheticRun cfg;
  cfg.dp = 1, cfg.tp = 1, cfg.pp = 4, cfg.steps = 3;
  const SyntheticCounts n = write_synthetic_run(dir_.string(), cfg);
  const CmdResult r = run_cmd(std::string(MEGASCALE_BINARY) + " trace " + dir_.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(fmt::format("{} flows", n.sends)), std::string::npos) << r.output;
  const nlohmann::json s = check(path("trace.json"));
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["flows"].get<size_t>(), n.sends);
  const CmdResult bad = run_cmd(std::string(MEGASCALE_BINARY) + " trace " + path("nowhere"));
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.output.find("no such folder"), std::string::npos) << bad.output;
}

// A real run: 2 pipeline stages x 2 tensor ranks under `megascale launch`; its merged trace has a
// flow for every pipeline send.
TEST_F(TraceMergeTest, RealPipelineRunHasAFlowPerSend) {
  LayoutRuns runs("ms_trace_real", layout_config(16, 2));
  const std::string out = runs.train(launch(4), "pp2tp2", "--parallel.pp=2 --parallel.tp=2 --train.steps=3");
  if (::testing::Test::HasFailure()) return;
  const std::string run_dir = runs.dir() + "/pp2tp2";
  ASSERT_TRUE(fs::is_directory(run_dir + "/records")) << "the run wrote no records/";
  const RunRecords run = read_run_records(run_dir);
  EXPECT_EQ(run.world, 4);
  EXPECT_TRUE(run.missing.empty());
  size_t sends = 0;
  for (const RankRecords& r : run.ranks)
    for (const CommRecord& c : r.comms) sends += c.op == "send";
  EXPECT_GT(sends, 0u);
  const TraceStats st = write_merged_trace(run, path("real.json"));
  EXPECT_EQ(st.flows, sends);
  EXPECT_EQ(st.unmatched_sends, 0u);
  EXPECT_EQ(st.unmatched_recvs, 0u);
  const nlohmann::json s = check(path("real.json"));
  ASSERT_FALSE(s.is_null());
  EXPECT_EQ(s["processes"], nlohmann::json({0, 1, 2, 3}));
  EXPECT_EQ(s["flows"].get<size_t>(), sends);
}

}  // namespace
