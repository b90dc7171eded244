// dashboard: the live web view of a launch (launch-internal; docs/observability.md "Dashboard").
// A Dashboard serves over HTTP (cpp-httplib) on `bind`:`port` (port 0: a free port chosen by the
// system) for as long as it lives:
//   /             the page (index.html, app.js, style.css and the chart library, files of
//                 `assets_dir`; a plain note naming the folder when they are missing)
//   /api/status   JSON: the job, the curves, every rank, the heatmap, the stragglers (job_status.h)
//   /metrics      Prometheus text format (job_status.h)
// A poller thread learns the run's folder from `<launch_dir>/run.json` (written by rank 0, with
// `out_dir`, `records_dir`, `world`, `config`) and tails the records there (obs/record_reader.h's
// RecordTail) every `poll` interval; the launcher reports the ranks' processes.
// The server's limits (GET/HEAD only, bodies capped, per-request deadlines): dashboard_server.h.
// Guarantees: the constructor throws an ms::Error naming the address when it cannot listen; a
// missing or malformed run.json or record line shows as an error in the status, never ends the
// launch; the destructor stops the poller and the server (no thread outlives it).
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "launch/dashboard_server.h"
#include "launch/job_status.h"

namespace ms::launch {

struct DashboardOptions {
  std::string bind = "127.0.0.1";
  int port = 0;                 // 0: any free port
  std::string assets_dir;       // the page's files; empty or missing: a plain note instead
  std::string launch_dir;       // where rank 0 writes run.json
  int world = 1;
  std::chrono::milliseconds poll{500};
  DashboardServerLimits limits;  // request deadline, body cap, workers (dashboard_server.h)
};

class Dashboard {
 public:
  explicit Dashboard(const DashboardOptions& opt);
  ~Dashboard();
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  int port() const { return port_; }
  // "http://<bind>:PORT/": the address it really listens on ("http://0.0.0.0:PORT/" for every
  // interface; an IPv6 address in brackets).
  std::string url() const;
  // "" on a loopback address; else a sentence saying the page is open to whoever reaches the port
  // (there is no authentication), which the launch prints as a warning.
  std::string exposure_warning() const;
  JobStatus& status() { return status_; }
  // Reads run.json and the records once more now (the launch ended: the last records are in).
  void poll_now();
  // A new attempt of a driven job: its ranks write fresh record files (the previous attempt's were
  // moved aside): read run.json and the records from their start again.
  void restart_records();

 private:
  void poll_once();
  void poller();

  DashboardOptions opt_;
  JobStatus status_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread server_thread_, poll_thread_;
  std::mutex poll_mu_;  // one poll at a time (poller thread or poll_now)
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  // Poller state (under poll_mu_).
  struct Tail;
  std::unique_ptr<Tail> tail_;
};

}  // namespace ms::launch
