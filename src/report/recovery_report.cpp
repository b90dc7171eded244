// recovery_report.cpp: see recovery_report.h.
#include "report/recovery_report.h"

#include <algorithm>  // std::max
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace ms {
namespace fs = std::filesystem;
using nlohmann::json;

json restore_summary(const std::string& out_dir, int world, double since) {
  json s = {{"ranks", 0}, {"memory_local", 0}, {"memory_peer", 0}, {"storage", 0}, {"restore_s", 0.0}};
  const char* phases[] = {"scan_seconds", "agree_seconds", "verify_seconds", "transfer_seconds", "load_seconds",
                          "read_seconds", "send_seconds"};
  for (int r = 0; r < world; r++) {
    const fs::path p = fs::path(out_dir) / fmt::format("restore_rank{}.json", r);
    std::error_code ec;
    const auto mtime = fs::last_write_time(p, ec);
    if (ec) continue;
    const double t =
        std::chrono::duration<double>(std::chrono::file_clock::to_sys(mtime).time_since_epoch()).count();
    if (t < since) continue;  // an earlier attempt's
    json j;
    try {
      std::ifstream in(p);
      j = json::parse(in);
    } catch (const std::exception& e) {
      s["errors"].push_back(fmt::format("{}: {}", p.string(), e.what()));
      continue;
    }
    s["ranks"] = s["ranks"].get<int>() + 1;
    const bool memory = j.value("path", "storage") == "memory";
    const std::string kind = !memory ? "storage" : j.value("source", "").starts_with("peer") ? "memory_peer"
                                                                                            : "memory_local";
    s[kind] = s[kind].get<int>() + 1;
    const double secs = j.value("seconds", 0.0);
    if (secs >= s["restore_s"].get<double>()) {
      s["restore_s"] = secs;
      s["slowest_rank"] = r;
      for (const char* ph : phases)
        if (j.contains(ph)) s["slowest_phases"][ph] = j[ph];
    }
    const double slowest_start = s.contains("slowest_startup") ? s["slowest_startup"].value("total", 0.0) : -1.0;
    if (j.contains("startup") && j["startup"].value("total", 0.0) >= slowest_start) s["slowest_startup"] = j["startup"];
    if (j.contains("memory_skipped")) s["memory_skipped"] = j["memory_skipped"];
    s["step"] = j.value("step", -1);
    s["bytes_received"] = s.value("bytes_received", 0.0) + j.value("bytes_received", 0.0);
    s["bytes_read"] = s.value("bytes_read", 0.0) + j.value("bytes_read", 0.0);
  }
  const int n = s["ranks"], st = s["storage"];
  s["path"] = n == 0 ? "none" : st == n ? "storage" : st == 0 ? "memory" : "mixed";
  return s;
}

std::string recovery_table(const std::string& events_path) {
  fs::path p = events_path;
  if (fs::is_directory(p)) p /= "events.jsonl";
  std::ifstream in(p);
  if (!in) return fmt::format("{}: cannot be read (give the driver's log folder or its events.jsonl)", p.string());
  std::vector<json> ev;
  for (std::string line; std::getline(in, line);) {
    try {
      ev.push_back(json::parse(line));
    } catch (const std::exception&) {  // a torn last line of a killed driver
    }
  }
  std::string out = "| fault | kind | stop | self-checks | restart → first step | warm ranks | path | restore | "
                    "steps repeated | fault_detected → resumed |\n|---|---|---:|---:|---:|---:|---|---:|---:|---:|\n";
  int faults = 0;
  for (size_t i = 0; i < ev.size(); i++) {
    if (ev[i].value("event", "") != "fault_detected") continue;
    faults++;
    double stopped = -1, checked = -1, restart = -1, resumed = -1, total = -1, restore = -1;
    std::string path = "-", repeated = "-", warm = "-";
    for (size_t k = i + 1; k < ev.size() && ev[k].value("event", "") != "fault_detected"; k++) {
      const std::string e = ev[k].value("event", "");
      const double m = ev[k].value("mono", 0.0);
      if (e == "ranks_stopped" && stopped < 0) stopped = m;
      if (e == "selfcheck_done" && checked < 0) checked = m;
      if (e == "restart" && restart < 0) restart = m;
      if (e == "resumed" && resumed < 0) {
        resumed = m, total = ev[k].value("recovery_s", -1.0);
        repeated = std::to_string(ev[k].value("steps_repeated", 0));
        if (ev[k].contains("warm_ranks")) warm = std::to_string(ev[k].value("warm_ranks", 0));
      }
      if (e == "recovery" && path == "-") {
        path = fmt::format("{} ({} own, {} peer, {} storage)", ev[k].value("path", "?"), ev[k].value("memory_local", 0),
                           ev[k].value("memory_peer", 0), ev[k].value("storage", 0));
        restore = ev[k].value("restore_s", -1.0);
      }
    }
    const double t0 = ev[i].value("mono", 0.0);
    auto d = [](double a, double b) { return a >= 0 && b >= 0 ? fmt::format("{:.2f} s", a - b) : std::string("-"); };
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", faults, ev[i].value("kind", "?"),
                       d(stopped, t0), d(checked, stopped), d(resumed, restart), warm, path,
                       restore >= 0 ? fmt::format("{:.2f} s", restore) : "-", repeated,
                       total >= 0 ? fmt::format("{:.2f} s", total) : "-");
  }
  if (faults == 0) return fmt::format("{}: no fault, no recovery\n", p.string());
  return out + "(times from the driver's events: a fault's own moment is its injector's to know, so detection "
               "is left to bench_recovery.sh; restore: the slowest rank's, from its restore_rank<R>.json)\n";
}

}  // namespace ms
