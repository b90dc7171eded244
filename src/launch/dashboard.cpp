// dashboard.cpp: see dashboard.h. Two threads: cpp-httplib's listener (with a small worker pool)
// and the poller (run.json, then the record files through RecordTail).
#include "launch/dashboard.h"

#include <sys/socket.h>  // setsockopt

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace ms::launch {

namespace fs = std::filesystem;

struct Dashboard::Tail {
  std::unique_ptr<RecordTail> records;  // once run.json is read
  std::string last_error;
};

namespace {

// The reply for a handler that threw: 500 with the reason, as text.
void fail(httplib::Response& res, const std::string& what) {
  res.status = 500;
  res.set_content(what + "\n", "text/plain; charset=utf-8");
}

}  // namespace

Dashboard::Dashboard(const DashboardOptions& opt)
    : opt_(opt), status_(opt.world), server_(std::make_unique<DashboardServer>(opt.limits)),
      tail_(std::make_unique<Tail>()) {
  MS_CHECK(opt.port >= 0 && opt.port <= 65535, "dashboard port {} is out of range 0..65535", opt.port);
  // Methods, body sizes, request deadlines and workers: dashboard_server.h.
  httplib::Server& s = *server_;
  // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second launch could bind
  // a port already serving another dashboard and split its requests silently.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.Get("/api/status", [this](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_header("Cache-Control", "no-store");
      res.set_content(status_.status_json().dump(), "application/json");
    } catch (const std::exception& e) {
      fail(res, fmt::format("cannot compute the status: {}", e.what()));
    }
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_header("Cache-Control", "no-store");
      res.set_content(status_.prometheus_text(), "text/plain; version=0.0.4; charset=utf-8");
    } catch (const std::exception& e) {
      fail(res, fmt::format("cannot compute the metrics: {}", e.what()));
    }
  });
  std::error_code ec;
  if (!opt.assets_dir.empty() && fs::is_regular_file(fs::path(opt.assets_dir) / "index.html", ec)) {
    MS_CHECK(s.set_mount_point("/", opt.assets_dir), "cannot serve the dashboard's files from {}", opt.assets_dir);
  } else {
    const std::string note = fmt::format(
        "<!doctype html><title>megascale</title><p>The dashboard's page is not installed ({}: no index.html); "
        "run scripts/setup.sh and rebuild. <a href=\"/api/status\">/api/status</a> and <a href=\"/metrics\">/metrics</a> "
        "work.</p>",
        opt.assets_dir.empty() ? std::string("no folder given") : opt.assets_dir);
    s.Get("/", [note](const httplib::Request&, httplib::Response& res) { res.set_content(note, "text/html; charset=utf-8"); });
  }
  if (opt.port == 0) {
    port_ = s.bind_to_any_port(opt.bind);
    MS_CHECK(port_ > 0, "the dashboard cannot listen on {} (any port): the address is not local or not valid", opt.bind);
  } else {
    MS_CHECK(s.bind_to_port(opt.bind, opt.port), "the dashboard cannot listen on {}:{}: the port is taken or the "
             "address is not local (--dashboard-port 0 picks a free port)", opt.bind, opt.port);
    port_ = opt.port;
  }
  server_thread_ = std::thread([this] { server_->listen_after_bind(); });
  poll_thread_ = std::thread([this] { poller(); });
}

Dashboard::~Dashboard() {
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (poll_thread_.joinable()) poll_thread_.join();
  // stop() only acts on a running listener: wait (briefly) until the thread got there.
  for (int i = 0; i < 200 && !server_->is_running(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server_->stop();
  if (server_thread_.joinable()) server_thread_.join();
}

std::string Dashboard::url() const {
  const std::string host = opt_.bind.empty() ? "0.0.0.0"
                           : opt_.bind.find(':') != std::string::npos ? "[" + opt_.bind + "]"
                                                                       : opt_.bind;
  return fmt::format("http://{}:{}/", host, port_);
}

std::string Dashboard::exposure_warning() const {
  const std::string& b = opt_.bind;
  if (b == "localhost" || b == "::1" || b.rfind("127.", 0) == 0) return "";
  const bool every = b.empty() || b == "0.0.0.0" || b == "::";
  return fmt::format("the dashboard listens on {}:{}{} and has no authentication: anyone who can reach that port "
                     "can read all that the page, /api/status and /metrics show",
                     b.empty() ? "0.0.0.0" : b, port_, every ? " (every interface)" : "");
}

void Dashboard::poll_now() {
  std::lock_guard lock(poll_mu_);
  poll_once();
}

void Dashboard::restart_records() {
  std::lock_guard lk(poll_mu_);
  tail_->records.reset();
}

void Dashboard::poll_once() {
  Tail& t = *tail_;
  try {
    if (!t.records) {
      const fs::path run_json = fs::path(opt_.launch_dir) / "run.json";
      std::error_code ec;
      if (opt_.launch_dir.empty() || !fs::exists(run_json, ec)) return;  // rank 0 has not got there yet
      std::ifstream in(run_json);
      MS_CHECK(in, "cannot open {}", run_json.string());
      std::stringstream text;
      text << in.rdbuf();
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text.str());
      } catch (const nlohmann::json::exception& e) {
        MS_FAIL("{} is not JSON: {}", run_json.string(), e.what());
      }
      MS_CHECK(j.contains("records_dir") && j["records_dir"].is_string(), "{} has no records_dir (a string)",
               run_json.string());
      const std::string out_dir = j.value("out_dir", std::string());
      const std::string records_dir = j["records_dir"].get<std::string>();
      status_.set_run(out_dir, records_dir);
      t.records = std::make_unique<RecordTail>(records_dir);
    }
    status_.add_records(t.records->poll());
    if (!t.last_error.empty()) status_.set_error("");
    t.last_error.clear();
  } catch (const std::exception& e) {
    // Shown on the page and in /api/status; the poll is retried (a record line may be fixed by a
    // replaced file, run.json by a later write).
    if (t.last_error != e.what()) status_.set_error(e.what());
    t.last_error = e.what();
  }
}

void Dashboard::poller() {
  std::unique_lock lock(stop_mu_);
  while (!stopping_) {
    lock.unlock();
    {
      std::lock_guard plock(poll_mu_);
      poll_once();
    }
    lock.lock();
    stop_cv_.wait_for(lock, opt_.poll, [this] { return stopping_; });
  }
}

}  // namespace ms::launch
