// test_dashboard: the launcher's live dashboard (src/launch/dashboard.h, job_status.h), fed by
// stand-in ranks (tests/launch/fake_rank.py: run.json in $MEGASCALE_LAUNCH_DIR, growing record
// files, rank 2's forward 20% slower): the JSON status (step, ranks, heatmap, the straggler),
// /metrics through Python's prometheus_client parser sampled twice (counters only grow), the page
// in headless chromium driven by puppeteer-core (the step shown, rank 2 highlighted; a screenshot
// in <build>/test_artifacts/), the launch folder's life cycle, and JobStatus on its own. The server's
// limits (dashboard_server.h): only GET and HEAD, bodies capped (refused before they are read), a
// client dribbling its headers cut off at the request deadline; the address it really listens on
// and the warning that there is no authentication.
#include <arpa/inet.h>   // htonl
#include <netinet/in.h>  // sockaddr_in
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>  // stat
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "common/processes.h"
#include "common/test_util.h"
#include "launch/dashboard.h"
#include "launch/job_status.h"

namespace {

namespace fs = std::filesystem;
using ms::testing::Clock;
using nlohmann::json;

const std::string kBin = MEGASCALE_BINARY;
const std::string kSrc = MEGASCALE_SOURCE_DIR;

// A launch of fake ranks with a dashboard on a free port.
class DashboardLaunch {
 public:
  DashboardLaunch(const fs::path& dir, int steps, double interval_s, const std::vector<std::string>& extra = {})
      : start_(Clock::now()) {
    std::vector<std::string> argv = {kBin, "launch", "-n", "4", "--dashboard-port", "0", "--run-dir", (dir / "launch").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    for (const std::string& a : {std::string("--"), std::string("/usr/bin/python3"), kSrc + "/tests/launch/fake_rank.py",
                                 (dir / "run").string(), std::to_string(steps), std::to_string(interval_s),
                                 std::string("2"), std::string("0.2")})
      argv.push_back(a);
    proc_ = ms::testing::spawn(argv, {}, (dir / "launch.log").string());
    static const std::regex re(R"(megascale launch: dashboard at http://127\.0\.0\.1:(\d+)/)");
    ms::testing::wait_all({&proc_}, start_, 30, [&] {
      std::smatch m;
      const std::string out = proc_.output();
      if (std::regex_search(out, m, re)) port_ = std::stoi(m[1]);
      return port_ > 0;
    });
  }
  ~DashboardLaunch() { wait(); }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/"; }
  ms::testing::Proc& proc() { return proc_; }
  void wait(double limit_s = 120) { ms::testing::wait_all({&proc_}, start_, limit_s); }

  // GET path; an empty body when the request fails.
  std::string get(const std::string& path, std::string* content_type = nullptr) const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_connection_timeout(5);
    cli.set_read_timeout(10);
    auto res = cli.Get(path.c_str());
    if (!res || res->status != 200) return "";
    if (content_type) *content_type = res->get_header_value("Content-Type");
    return res->body;
  }
  json status() const {
    const std::string body = get("/api/status");
    return body.empty() ? json() : json::parse(body);
  }
  // Polls /api/status until pred holds (or limit_s passed); returns the last status.
  json wait_status(const std::function<bool(const json&)>& pred, double limit_s) const {
    const auto t0 = Clock::now();
    json st;
    while (ms::testing::seconds_since(t0) < limit_s) {
      st = status();
      if (!st.is_null() && pred(st)) return st;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return st;
  }

 private:
  Clock::time_point start_;
  ms::testing::Proc proc_;
  int port_ = 0;
};

bool has_chronic(const json& st, int rank, const std::string& seg) {
  for (const auto& s : st["stragglers"])
    if (s["rank"] == rank && s["segment"] == seg && s["chronic"] == true) return true;
  return false;
}

class Dashboard : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_dashboard"; }
};

TEST_F(Dashboard, StatusShowsRanksStepsAndTheStraggler) {
  DashboardLaunch l(dir_, 40, 0.1);
  ASSERT_GT(l.port(), 0) << l.proc().output();
  const json st = l.wait_status([](const json& s) { return s["job"]["step"].is_number() && s["job"]["step"] >= 12 &&
                                                          has_chronic(s, 2, "forward"); }, 60);
  ASSERT_FALSE(st.is_null()) << l.proc().output();
  ASSERT_TRUE(has_chronic(st, 2, "forward")) << st.dump(1);
  EXPECT_EQ(st["job"]["world"], 4);
  EXPECT_EQ(st["job"]["out_dir"], fs::absolute(dir_ / "run").string());
  EXPECT_TRUE(st["job"]["loss"].is_number()) << st["job"].dump();
  EXPECT_NEAR(st["job"]["mfu"].get<double>(), 0.1, 1e-9);
  EXPECT_EQ(st["job"]["error"], "") << st["job"].dump();
  ASSERT_EQ(st["ranks"].size(), 4u);
  for (int r = 0; r < 4; r++) {
    EXPECT_EQ(st["ranks"][r]["state"], "running") << st["ranks"][r].dump();
    EXPECT_TRUE(st["ranks"][r]["coord"].is_object()) << st["ranks"][r].dump();
  }
  EXPECT_EQ(st["ranks"][3]["coord"]["pp"], 1);
  // Only rank 2's forward is a chronic straggler; the heatmap marks exactly that cell.
  for (const auto& s : st["stragglers"]) EXPECT_TRUE(!s["chronic"].get<bool>() || (s["rank"] == 2 && s["segment"] == "forward")) << s.dump();
  const json& h = st["heatmap"];
  ASSERT_EQ(h["ranks"].size(), 4u);
  const auto segs = h["segments"].get<std::vector<std::string>>();
  const size_t fwd = std::find(segs.begin(), segs.end(), "forward") - segs.begin();
  ASSERT_LT(fwd, segs.size());
  EXPECT_TRUE(h["straggler"][2][fwd].get<bool>());
  EXPECT_NEAR(h["ratio"][2][fwd].get<double>(), 1.2, 0.01);
  EXPECT_FALSE(h["straggler"][0][fwd].get<bool>());
  // The launch ends cleanly; the ranks' exits were seen (the dashboard stops with the launcher).
  l.wait();
  EXPECT_EQ(l.proc().code, 0) << l.proc().output();
}

TEST_F(Dashboard, MetricsParseWithPrometheusClientAndCountersOnlyGrow) {
  if (std::system("/usr/bin/python3 -c 'import prometheus_client' 2>/dev/null") != 0)
    MS_SKIP_OR_FAIL_IN_CI("python3-prometheus-client is not installed (scripts/setup.sh)");
  DashboardLaunch l(dir_, 60, 0.1);
  ASSERT_GT(l.port(), 0) << l.proc().output();
  l.wait_status([](const json& s) { return s["job"]["step"].is_number() && s["job"]["step"] >= 3; }, 60);
  std::string ctype;
  const std::string text = l.get("/metrics", &ctype);
  EXPECT_NE(text.find("# TYPE megascale_steps_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("megascale_segment_ms{rank=\"2\",segment=\"forward\"}"), std::string::npos) << text;
  const ms::testing::CmdResult r = ms::testing::run_cmd("/usr/bin/python3 " + kSrc + "/tests/launch/metrics_check.py " +
                                                        l.url() + "metrics --gap 1.5 --expect-growth");
  std::printf("%s", r.output.c_str());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("metrics ok"), std::string::npos) << r.output;
}

TEST_F(Dashboard, PageInHeadlessChromiumShowsStepAndHighlightsStraggler) {
  if (!fs::exists("/usr/bin/chromium")) MS_SKIP_OR_FAIL_IN_CI("Debian's chromium is not installed (scripts/setup.sh)");
  if (!fs::exists(kSrc + "/third_party/npm/node_modules/puppeteer-core"))
    MS_SKIP_OR_FAIL_IN_CI("puppeteer-core is not installed in third_party/npm (scripts/setup.sh)");
  if (std::system("node --version >/dev/null 2>&1") != 0) MS_SKIP_OR_FAIL_IN_CI("node is not installed");
  DashboardLaunch l(dir_, 200, 0.15);
  ASSERT_GT(l.port(), 0) << l.proc().output();
  const json st = l.wait_status([](const json& s) { return s["job"]["step"].is_number() && s["job"]["step"] >= 5; }, 60);
  ASSERT_FALSE(st.is_null()) << l.proc().output();
  // The page's own files and uPlot come from the launcher (no CDN).
  EXPECT_NE(l.get("/").find("uPlot.iife.min.js"), std::string::npos);
  EXPECT_FALSE(l.get("/uPlot.iife.min.js").empty()) << "uPlot is not served: run scripts/setup.sh and reconfigure";
  const fs::path artifacts = fs::current_path() / "test_artifacts";
  fs::create_directories(artifacts);
  const std::string shot = (artifacts / "dashboard.png").string();
  fs::remove(shot);
  const ms::testing::CmdResult r = ms::testing::run_cmd("node " + kSrc + "/tests/launch/dashboard_browser.js " + l.url() +
                                                        " " + shot + " 8 2 forward");
  std::printf("%s", r.output.c_str());
  ASSERT_EQ(r.code, 0) << r.output << "\nlauncher:\n" << l.proc().output();
  EXPECT_TRUE(fs::exists(shot) && fs::file_size(shot) > 10000) << shot;
  std::printf("dashboard screenshot: %s\n", shot.c_str());
  const json seen = json::parse(r.output.substr(r.output.find('{')));
  EXPECT_GE(seen["shown"].get<int>(), 8);
  EXPECT_NE(seen["straggler_cell"].get<std::string>().find("straggler"), std::string::npos) << seen.dump();
  // Ending the launch early (as Ctrl-C would) ends the dashboard with it.
  ::kill(l.proc().pid, SIGTERM);
  l.wait(60);
}

TEST_F(Dashboard, LaunchFolderIsPrivateAndRemovedAndPortNegativeTurnsItOff) {
  const std::string script =
      "stat -c %a \"$MEGASCALE_LAUNCH_DIR\"; echo \"dir=$MEGASCALE_LAUNCH_DIR\"";
  const ms::testing::CmdResult r = ms::testing::run_cmd(kBin + " launch -n 1 --dashboard-port -1 --run-dir " +
                                                        dir_.string() + " -- /bin/sh -c '" + script + "' 2>&1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[rank 0] 700"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("dashboard at"), std::string::npos) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("dir=(\\S+)"))) << r.output;
  EXPECT_FALSE(fs::exists(m[1].str())) << "the launch folder outlived the launch: " << m[1];
  // A port that is taken is named in the error.
  httplib::Server blocker;
  const int port = blocker.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  const ms::testing::CmdResult taken = ms::testing::run_cmd(kBin + " launch -n 1 --dashboard-port " + std::to_string(port) +
                                                            " -- /bin/true 2>&1");
  EXPECT_NE(taken.code, 0) << taken.output;
  EXPECT_NE(taken.output.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos) << taken.output;
}

TEST_F(Dashboard, LingerKeepsServingAfterTheEndWithExitStates) {
  DashboardLaunch l(dir_, 3, 0.05, {"--dashboard-linger", "30"});
  ASSERT_GT(l.port(), 0) << l.proc().output();
  const json st = l.wait_status([](const json& s) { return s["job"]["state"] != "running"; }, 60);
  EXPECT_EQ(st["job"]["state"], "finished") << st.dump(1);
  EXPECT_EQ(st["job"]["step"], 2) << st["job"].dump();
  EXPECT_EQ(st["job"]["steps_seen"], 3) << st["job"].dump();
  for (const auto& r : st["ranks"]) {
    EXPECT_EQ(r["state"], "exited") << r.dump();
    EXPECT_EQ(r["exit_code"], 0) << r.dump();
  }
  ::kill(l.proc().pid, SIGINT);  // ends the linger at once
  l.wait(20);
  EXPECT_EQ(l.proc().code, 0) << l.proc().output();
  EXPECT_LT(l.proc().end_s, 25);
}

// A TCP connection to 127.0.0.1:port (-1 on failure).
int connect_to(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  if (::connect(s, (sockaddr*)&a, sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

// Everything the server sends until it closes the connection (or limit_s passes).
std::string read_until_closed(int s, double limit_s) {
  std::string got;
  const auto t0 = Clock::now();
  char buf[4096];
  while (ms::testing::seconds_since(t0) < limit_s) {
    pollfd p{s, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(s, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, (size_t)n);
  }
  return got;
}

ms::launch::DashboardOptions local_dashboard() {
  ms::launch::DashboardOptions o;
  o.bind = "127.0.0.1";
  o.port = 0;
  return o;
}

TEST(DashboardServer, OnlyGetAndHeadAreServed) {
  ms::launch::Dashboard d(local_dashboard());
  httplib::Client cli("127.0.0.1", d.port());
  cli.set_read_timeout(10);
  auto get = cli.Get("/api/status");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 200);
  auto head = cli.Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  auto refused = [](const httplib::Result& res, const char* method) {
    ASSERT_TRUE(res) << method;
    EXPECT_EQ(res->status, 405) << method;
    EXPECT_EQ(res->get_header_value("Allow"), "GET, HEAD") << method;
  };
  refused(cli.Post("/api/status", "x", "text/plain"), "POST");
  refused(cli.Put("/metrics", "x", "text/plain"), "PUT");
  refused(cli.Delete("/api/status"), "DELETE");
  refused(cli.Patch("/", "x", "text/plain"), "PATCH");
}

TEST(DashboardServer, LargeBodiesAreRefusedBeforeTheyAreRead) {
  ms::launch::Dashboard d(local_dashboard());
  // A 256 MiB POST (its first 64 KiB sent): 405 at once, and the connection closed.
  // A GET announcing a body over the cap: 413, the same way.
  const std::string chunk(65536, 'x');
  for (const std::string method : {"POST", "GET"}) {
    const int s = connect_to(d.port());
    ASSERT_GE(s, 0);
    const std::string head = method + " /api/status HTTP/1.1\r\nHost: x\r\nContent-Length: 268435456\r\n\r\n";
    ASSERT_EQ(::send(s, head.data(), head.size(), MSG_NOSIGNAL), (ssize_t)head.size());
    ::send(s, chunk.data(), chunk.size(), MSG_NOSIGNAL);  // the server may already have closed
    const std::string reply = read_until_closed(s, 30);
    ::close(s);
    EXPECT_EQ(reply.rfind(method == "POST" ? "HTTP/1.1 405" : "HTTP/1.1 413", 0), 0u) << method << ": " << reply;
  }
}

TEST(DashboardServer, AClientDribblingItsHeadersIsCutOffAtTheDeadline) {
  ms::launch::DashboardOptions o = local_dashboard();
  o.limits.request_timeout = std::chrono::milliseconds(1000);
  ms::launch::Dashboard d(o);
  // One header line every 100 ms (each within the read timeout), 100 lines in all: the server must
  // close the connection before the headers end instead of waiting for them.
  const int s = connect_to(d.port());
  ASSERT_GE(s, 0);
  std::string line = "GET /api/status HTTP/1.1\r\nHost: x\r\n";
  bool closed = false;
  std::string reply;
  for (int i = 0; i < 100 && !closed; i++) {
    if (::send(s, line.data(), line.size(), MSG_NOSIGNAL) < 0) closed = true;
    pollfd p{s, POLLIN, 0};
    if (!closed && ::poll(&p, 1, 100) > 0) {
      char buf[4096];
      const ssize_t n = ::recv(s, buf, sizeof buf, 0);
      if (n > 0) reply.append(buf, (size_t)n);
      closed = n <= 0;
    }
    line = "X-Slow-" + std::to_string(i) + ": 1\r\n";
  }
  ::close(s);
  EXPECT_TRUE(closed) << "a client sending a header line every 100 ms held a worker for 10 s: " << reply;
  EXPECT_EQ(reply.find("HTTP/1.1 200"), std::string::npos) << reply;
  // The server still answers others.
  httplib::Client cli("127.0.0.1", d.port());
  auto res = cli.Get("/api/status");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

TEST(DashboardServer, EveryInterfaceIsPrintedAsSuchWithAWarning) {
  ms::launch::DashboardOptions o = local_dashboard();
  ms::launch::Dashboard loopback(o);
  EXPECT_EQ(loopback.url(), "http://127.0.0.1:" + std::to_string(loopback.port()) + "/");
  EXPECT_EQ(loopback.exposure_warning(), "");
  o.bind = "0.0.0.0";
  ms::launch::Dashboard every(o);
  EXPECT_EQ(every.url(), "http://0.0.0.0:" + std::to_string(every.port()) + "/");
  EXPECT_NE(every.exposure_warning().find("no authentication"), std::string::npos) << every.exposure_warning();
  // What `megascale launch` prints.
  const ms::testing::CmdResult r =
      ms::testing::run_cmd(kBin + " launch -n 1 --dashboard-bind 0.0.0.0 -- /bin/true 2>&1");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(dashboard at http://0\.0\.0\.0:\d+/)"))) << r.output;
  EXPECT_NE(r.output.find("no authentication"), std::string::npos) << r.output;
}

// JobStatus alone: rank states from wait statuses, counters, the thinned curves.
TEST(JobStatus, CountsStepsTokensAndRankStates) {
  ms::launch::JobStatus js(2, 4, 0.05);
  js.rank_started(0, 100);
  js.rank_started(1, 101);
  ms::RunRecords recs;
  for (int r = 0; r < 2; r++) {
    ms::RankRecords rr;
    rr.rank = r;
    rr.has_header = true;
    rr.header.rank = r;
    rr.header.world = 2;
    rr.header.coord.dp = r;
    for (int s = 0; s < 3; s++) {
      ms::RecordedStep st;
      st.step = s;
      st.t0 = s * 1000000000LL;
      st.t1 = st.t0 + 500000000LL;  // 0.5 s
      st.tokens_per_s = 2000;
      st.mfu = 0.25;
      if (r == 0) st.loss = 5.0 - s;
      st.ms = {{"forward", r == 1 ? 13.0 : 10.0}, {"backward", 20.0}};
      rr.steps.push_back(st);
    }
    recs.ranks.push_back(rr);
  }
  js.add_records(recs);
  js.rank_ended(0, 0);            // exited 0
  js.rank_ended(1, SIGKILL);      // killed by signal 9 (a wait status of a signal death)
  const json st = js.status_json();
  EXPECT_EQ(st["job"]["step"], 2);
  EXPECT_DOUBLE_EQ(st["job"]["loss"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(st["job"]["tokens_total"].get<double>(), 3 * 1000.0);
  EXPECT_EQ(st["ranks"][0]["state"], "exited");
  EXPECT_EQ(st["ranks"][0]["exit_code"], 0);
  EXPECT_EQ(st["ranks"][1]["state"], "killed");
  EXPECT_EQ(st["ranks"][1]["signal"], SIGKILL);
  EXPECT_EQ(st["history"]["step"].size(), 3u);
  const std::string prom = js.prometheus_text();
  EXPECT_NE(prom.find("megascale_steps_total 3\n"), std::string::npos) << prom;
  EXPECT_NE(prom.find("megascale_tokens_total 3000\n"), std::string::npos) << prom;
  EXPECT_NE(prom.find("megascale_rank_running{rank=\"1\"} 0\n"), std::string::npos) << prom;
  // Two dp peers: each is the other's only peer; rank 1's forward is 30% over rank 0's.
  EXPECT_NE(prom.find("megascale_straggler{rank=\"1\",segment=\"forward\"} 1\n"), std::string::npos) << prom;
}

}  // namespace
