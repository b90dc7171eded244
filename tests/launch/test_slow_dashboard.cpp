// test_slow_dashboard: the dashboard of a real training launch: `megascale launch -n 4
// --dashboard-port 0 -- train <tiny config>` with a straggler injected on rank 2
// (MEGASCALE_FAULT=slow:rank=2:seg=forward:ratio=0.2, docs/observability.md; the detector is
// obs/straggler.h's, on CPU time); rank 0 publishes
// run.json, the ranks' record files feed the page. Headless chromium (puppeteer-core) sees the
// current step and rank 2's forward highlighted (screenshot <build>/test_artifacts/
// dashboard_train.png); /metrics parses with prometheus_client and its counters only grow.
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/layout_runs.h"
#include "common/processes.h"
#include "common/test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ms::testing::Clock;

const std::string kSrc = MEGASCALE_SOURCE_DIR;

TEST(SlowDashboard, TrainingLaunchShowsStepStragglerAndMetrics) {
  if (!fs::exists("/usr/bin/chromium")) MS_SKIP_OR_FAIL_IN_CI("Debian's chromium is not installed (scripts/setup.sh)");
  if (!fs::exists(kSrc + "/third_party/npm/node_modules/puppeteer-core"))
    MS_SKIP_OR_FAIL_IN_CI("puppeteer-core is not installed in third_party/npm (scripts/setup.sh)");
  if (std::system("/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null") != 0)
    MS_SKIP_OR_FAIL_IN_CI("python3-prometheus-client is not installed (scripts/setup.sh)");
  ms::testing::LayoutRuns runs("ms_slow_dashboard", ms::testing::straggler_config(400));
  const auto start = Clock::now();
  ms::testing::Proc p = ms::testing::spawn(
      {MEGASCALE_BINARY, "launch", "-n", "4", "--dashboard-port", "0", "--", "train", runs.dir() + "/cfg.toml",
       "--train.out_dir=" + runs.dir() + "/run", "--train.steps=400", "--obs.flush_ms=200", "--checkpoint.every=0"},
      {{"MEGASCALE_FAULT", "slow:rank=2:seg=forward:ratio=0.2"}, {"OMP_NUM_THREADS", "1"}}, runs.dir() + "/launch.log");
  int port = 0;
  static const std::regex re(R"(dashboard at http://127\.0\.0\.1:(\d+)/)");
  ms::testing::wait_all({&p}, start, 30, [&] {
    std::smatch m;
    const std::string out = p.output();
    if (std::regex_search(out, m, re)) port = std::stoi(m[1]);
    return port > 0;
  });
  ASSERT_GT(port, 0) << p.output();
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/";
  // Wait for the first steps in the status (run.json read, records tailed).
  json st;
  for (int i = 0; i < 600 && !p.done; i++) {
    httplib::Client cli("127.0.0.1", port);
    if (auto res = cli.Get("/api/status"); res && res->status == 200) {
      st = json::parse(res->body);
      if (st["job"]["step"].is_number() && st["job"]["step"] >= 3) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(st["job"]["step"].is_number()) << st.dump(1) << "\n" << p.output();
  EXPECT_EQ(st["job"]["out_dir"], fs::absolute(runs.dir() + "/run").lexically_normal().string()) << st["job"].dump();

  const auto metrics = ms::testing::run_cmd("/usr/bin/python3 " + kSrc + "/tests/launch/metrics_check.py " + url +
                                            "metrics --gap 2 --expect-growth");
  std::printf("%s", metrics.output.c_str());
  EXPECT_EQ(metrics.code, 0) << metrics.output;

  const fs::path artifacts = fs::current_path() / "test_artifacts";
  fs::create_directories(artifacts);
  const std::string shot = (artifacts / "dashboard_train.png").string();
  const auto browser = ms::testing::run_cmd("node " + kSrc + "/tests/launch/dashboard_browser.js " + url + " " + shot +
                                            " 5 2 forward");
  std::printf("%s", browser.output.c_str());
  EXPECT_EQ(browser.code, 0) << browser.output;
  std::printf("dashboard screenshot: %s\n", shot.c_str());

  ::kill(p.pid, SIGTERM);  // the ranks save nothing (checkpoint.every=0) and stop
  ms::testing::wait_all({&p}, start, 600);
}

}  // namespace
