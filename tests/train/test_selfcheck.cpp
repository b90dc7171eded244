// Self-check diagnostics (train/selfcheck.h, `megascale selfcheck`): the GEMM check passes here and
// its comparison fails on a perturbed product; the collective check passes on a world of one and of
// three real processes, and the injected fault (MEGASCALE_FAULT=selfcheck:host=1) makes every member
// report allreduce_ok=false with exit code 3; a missing peer is exit code 1 within the timeout.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "comm/comm_env.h"
#include "comm/world.h"
#include "common/processes.h"
#include "common/test_util.h"
#include "train/selfcheck.h"

namespace {

using nlohmann::json;
using ms::testing::Proc;

TEST(SelfCheckGemm, PassesAndReportsSpeed) {
  ms::GemmCheckOptions opt;
  opt.bench_seconds = 0.05;
  const ms::GemmCheckResult r = ms::run_gemm_check(opt);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_LT(r.max_rel_err, 1e-5);
  EXPECT_GT(r.gflops, 0.0);
  EXPECT_GE(r.timed_gemms, 1);
}

TEST(SelfCheckGemm, ComparisonFailsOnPerturbedProduct) {
  const ms::GemmProblem p = ms::make_gemm_problem(96, 80, 64, 7);
  std::vector<float> c(96 * 80);
  ms::run_gemm(p, c.data());
  ms::GemmComparison ok = ms::compare_gemm_to_reference(p, c.data(), 64, 1e-4, 7);
  EXPECT_TRUE(ok.ok) << ok.error;

  // One ulp everywhere is rounding noise: still passes.
  std::vector<float> ulp = c;
  for (float& x : ulp) x = std::nextafter(x, std::numeric_limits<float>::infinity());
  EXPECT_TRUE(ms::compare_gemm_to_reference(p, ulp.data(), 64, 1e-4, 7).ok);

  // +0.01 everywhere (sum |a*b| is ~16 here, so ~6e-4 relative) fails, naming the entry.
  std::vector<float> bad = c;
  for (float& x : bad) x += 0.01f;
  ms::GemmComparison r = ms::compare_gemm_to_reference(p, bad.data(), 64, 1e-4, 7);
  EXPECT_FALSE(r.ok);
  EXPECT_GT(r.max_rel_err, 1e-4);
  EXPECT_NE(r.error.find("expected"), std::string::npos) << r.error;

  // A non-finite output fails.
  std::vector<float> nan(c.size(), std::nanf(""));
  EXPECT_FALSE(ms::compare_gemm_to_reference(p, nan.data(), 4, 1e-4, 7).ok);
}

TEST(SelfCheckCollective, SumCheckNamesSizeAndValues) {
  std::vector<float> v(1024, 6.0f);
  EXPECT_EQ(ms::check_allreduce_sum(v.data(), v.size(), 3), "");
  v[5] = 7.0f;
  const std::string e = ms::check_allreduce_sum(v.data(), v.size(), 3);
  EXPECT_NE(e.find("4 KiB"), std::string::npos) << e;
  EXPECT_NE(e.find("element 5 is 7, expected 6"), std::string::npos) << e;
}

TEST(SelfCheckCollective, WorldOfOneInProcess) {
  ms::CommEnv env;  // backend "self"
  auto world = ms::init_world(env);
  ms::CollectiveCheckOptions opt;
  opt.bench_bytes = 1 << 16;
  opt.bench_iters = 2;
  ms::CollectiveCheckResult r = ms::run_collective_check(*world, opt);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.failed_ranks.empty());
  EXPECT_TRUE(r.suspect_ranks.empty());
  EXPECT_EQ(r.gbps, 0.0) << "a group of one measures no bandwidth";

  opt.inject_fault = true;
  r = ms::run_collective_check(*world, opt);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.failed_ranks, std::vector<int>{0});
  EXPECT_EQ(r.suspect_ranks, std::vector<int>{0});
  EXPECT_NE(r.error.find("is 2, expected 1"), std::string::npos) << r.error;
}

TEST(SelfCheckReport, ChecksNotRunAreNull) {
  ms::SelfCheckReport r;
  r.rank = 2, r.world = 4, r.host_index = 1;
  r.gemm_requested = true;
  r.gemm = ms::GemmCheckResult{true, 1e-7, 12.5, 3, ""};
  const json j = json::parse(ms::selfcheck_report_json(r));
  EXPECT_EQ(j["rank"], 2);
  EXPECT_EQ(j["world"], 4);
  EXPECT_EQ(j["host_index"], 1);
  EXPECT_EQ(j["gemm_ok"], true);
  EXPECT_EQ(j["gemm_gflops"], 12.5);
  EXPECT_TRUE(j["allreduce_ok"].is_null());
  EXPECT_TRUE(j["allreduce_gbps"].is_null());
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["ok"], true);
  EXPECT_TRUE(j["gemm_error"].is_null());
  // A check asked for that an error stopped reads as failed, with the error.
  r.collective_requested = true;
  r.error = "rendezvous timed out";
  const json e = json::parse(ms::selfcheck_report_json(r));
  EXPECT_EQ(e["ok"], false);
  EXPECT_EQ(e["allreduce_ok"], false);
  EXPECT_EQ(e["allreduce_error"], "not run: rendezvous timed out");
  EXPECT_TRUE(e["allreduce_gbps"].is_null());
}

// ---- The real binary ----

class SelfCheckProcTest : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_selfcheck"; }

  // Ranks `ranks` of an n-rank world of `megascale selfcheck --collective`; extra(r): rank r's
  // additional environment.
  std::vector<Proc> start(int n, const std::vector<int>& ranks, const std::vector<std::string>& args,
                          const std::function<std::map<std::string, std::string>(int)>& extra = nullptr) {
    std::vector<Proc> ps;
    for (int r : ranks) {
      std::map<std::string, std::string> env = {{"MEGASCALE_BACKEND", "gloo"}, {"RANK", std::to_string(r)},
                                                {"WORLD_SIZE", std::to_string(n)},
                                                {"MEGASCALE_STORE", "file:" + path("store")},
                                                {"MEGASCALE_RUN_ID", "selfcheck"}};
      if (extra)
        for (const auto& [k, v] : extra(r)) env[k] = v;
      std::vector<std::string> argv = {MEGASCALE_BINARY, "selfcheck", "--collective", "--out", result_path(r)};
      argv.insert(argv.end(), args.begin(), args.end());
      ps.push_back(ms::testing::spawn(argv, env, path("out." + std::to_string(r))));
    }
    return ps;
  }
  std::string result_path(int r) const { return path("result." + std::to_string(r) + ".json"); }
  // The result file of rank r; it must equal the last line of the rank's output.
  json result(int r, const Proc& p) const {
    const std::string file = ms::testing::slurp(result_path(r));
    EXPECT_FALSE(file.empty()) << "rank " << r << " wrote no result. Output:\n" << p.output();
    if (file.empty()) return json::object();
    std::string out = p.output();
    while (!out.empty() && out.back() == '\n') out.pop_back();
    EXPECT_EQ(out.substr(out.rfind('\n') + 1) + "\n", file) << "stdout's last line is not the result";
    return json::parse(file);
  }
  static std::vector<Proc*> ptrs(std::vector<Proc>& ps) {
    std::vector<Proc*> v;
    for (Proc& p : ps) v.push_back(&p);
    return v;
  }
};

TEST_F(SelfCheckProcTest, ThreeRanksPass) {
  const auto t0 = ms::testing::Clock::now();
  std::vector<Proc> ps = start(3, {0, 1, 2}, {"--size-mb", "1", "--iters", "3"});
  ms::testing::wait_all(ptrs(ps), t0, 60);
  for (int r = 0; r < 3; r++) {
    EXPECT_EQ(ps[r].code, 0) << ps[r].output();
    const json j = result(r, ps[r]);
    EXPECT_EQ(j.value("rank", -1), r);
    EXPECT_EQ(j.value("world", -1), 3);
    EXPECT_EQ(j.value("host_index", 0), -1);
    EXPECT_EQ(j.value("allreduce_ok", false), true) << j.dump();
    EXPECT_TRUE(j["allreduce_error"].is_null()) << j.dump();
    EXPECT_GT(j.value("allreduce_gbps", 0.0), 0.0);
    EXPECT_TRUE(j["gemm_ok"].is_null());
    EXPECT_EQ(j.value("ok", false), true);
  }
}

TEST_F(SelfCheckProcTest, InjectedFaultFailsEveryRank) {
  const auto t0 = ms::testing::Clock::now();
  std::vector<Proc> ps = start(3, {0, 1, 2}, {"--size-mb", "1", "--iters", "2"}, [](int r) {
    return std::map<std::string, std::string>{{"MEGASCALE_FAULT", "selfcheck:host=1"},
                                              {"MEGASCALE_HOST_INDEX", std::to_string(r)}};
  });
  ms::testing::wait_all(ptrs(ps), t0, 60);
  for (int r = 0; r < 3; r++) {
    EXPECT_EQ(ps[r].code, 3) << ps[r].output();
    const json j = result(r, ps[r]);
    EXPECT_EQ(j.value("host_index", -1), r);
    EXPECT_EQ(j.value("allreduce_ok", true), false) << j.dump();
    EXPECT_NE(j.value("allreduce_error", "").find("expected 6"), std::string::npos) << j.dump();
    EXPECT_EQ(j["allreduce_suspect_ranks"], json::array({1})) << j.dump();
    EXPECT_EQ(j["allreduce_failed_ranks"], json::array({0, 1, 2})) << j.dump();
    EXPECT_EQ(j.value("fault_injected", false), r == 1);
    EXPECT_EQ(j.value("ok", true), false);
  }
}

TEST_F(SelfCheckProcTest, MissingPeerIsAnErrorWithinTheTimeout) {
  const auto t0 = ms::testing::Clock::now();
  std::vector<Proc> ps = start(3, {0, 1}, {"--timeout", "1"});  // rank 2 never comes
  ms::testing::wait_all(ptrs(ps), t0, 30);
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(ps[r].code, 1) << ps[r].output();
    EXPECT_LT(ps[r].end_s, 15.0);
    const json j = result(r, ps[r]);
    EXPECT_EQ(j.value("ok", true), false);
    EXPECT_EQ(j.value("allreduce_ok", true), false);
    EXPECT_NE(j.value("error", "").find("rendezvous"), std::string::npos) << j.dump();
  }
}

TEST_F(SelfCheckProcTest, GemmOnlyAlone) {
  const ms::testing::CmdResult c =
      ms::testing::run_cmd(std::string("env -u RANK -u WORLD_SIZE -u MEGASCALE_BACKEND -u MEGASCALE_FAULT ") +
                           MEGASCALE_BINARY + " selfcheck --gemm --out " + path("gemm.json"));
  EXPECT_EQ(c.code, 0) << c.output;
  const json j = json::parse(ms::testing::slurp(path("gemm.json")));
  EXPECT_EQ(j.value("gemm_ok", false), true) << j.dump();
  EXPECT_GT(j.value("gemm_gflops", 0.0), 0.0);
  EXPECT_TRUE(j["allreduce_ok"].is_null());
  EXPECT_EQ(j.value("world", 0), 1);
}

// A group of one checks its sum but measures no bandwidth: its "all-reduce" crosses no link.
TEST_F(SelfCheckProcTest, CollectiveAloneChecksTheSumAndMeasuresNoBandwidth) {
  const ms::testing::CmdResult c =
      ms::testing::run_cmd(std::string("env -u RANK -u WORLD_SIZE -u MEGASCALE_BACKEND -u MEGASCALE_FAULT ") +
                           MEGASCALE_BINARY + " selfcheck --collective --out " + path("alone.json"));
  EXPECT_EQ(c.code, 0) << c.output;
  const json j = json::parse(ms::testing::slurp(path("alone.json")));
  EXPECT_EQ(j.value("allreduce_ok", false), true) << j.dump();
  EXPECT_TRUE(j["allreduce_gbps"].is_null()) << j.dump();
  EXPECT_EQ(j.value("world", 0), 1);
}

}  // namespace
