// selfcheck_plan: see selfcheck_plan.h.
#include "launch/selfcheck_plan.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

namespace ms::launch {

SelfCheckCommand selfcheck_command(const SelfCheckSetup& s, int id, const std::map<std::string, std::string>& store_env,
                                   int first, int count, int world, bool gemm) {
  SelfCheckCommand c;
  c.id = id;
  c.timeout_ms = (int)(s.timeout_s * 1000);
  for (int rank = first; rank < first + count; rank++) {
    SelfCheckProc p;
    p.argv = s.command;
    p.argv.insert(p.argv.end(), {"--collective", "--timeout", fmt::format("{}", std::max(5.0, s.timeout_s / 2))});
    // The GEMM's speed is compared across hosts: 0.15 s of timed GEMMs (dozens of them) is enough,
    // and recovery waits for it.
    if (gemm && rank == 0) p.argv.insert(p.argv.end(), {"--gemm", "--gemm-seconds", "0.15"});
    // A pair round proves that the link carries correct data; its bandwidth is not compared (the
    // host round's is), so two all-reduces of 1 MiB rather than 8 of 4 (~0.2 s less per round over
    // a 1 Gbit/s link, and recovery waits for every round).
    if (!gemm) p.argv.insert(p.argv.end(), {"--size-mb", "1", "--iters", "2"});
    p.env = store_env;
    p.env["RANK"] = p.env["LOCAL_RANK"] = std::to_string(rank);
    p.env["WORLD_SIZE"] = std::to_string(world);
    // Values built as strings and moved in: assigning a short literal (operator=(const char*)) trips
    // GCC 12's false -Wrestrict at -O3 (GCC PR 105651).
    p.env.insert_or_assign("MEGASCALE_BACKEND", world > 1 ? s.backend : std::string("self"));
    p.env.insert_or_assign("OMP_NUM_THREADS", std::string("1"));
    c.procs.push_back(std::move(p));
  }
  return c;
}

std::vector<std::vector<std::pair<int, int>>> neighbour_rounds(const std::vector<int>& hosts) {
  std::vector<std::vector<std::pair<int, int>>> rounds;
  const size_t n = hosts.size();
  if (n < 2) return rounds;
  std::vector<std::pair<int, int>> pairs;
  for (size_t i = 0; i < (n == 2 ? 1 : n); i++) pairs.emplace_back(hosts[i], hosts[(i + 1) % n]);
  // Greedy: each round takes every pair whose hosts are still free in it.
  std::vector<bool> placed(pairs.size(), false);
  size_t left = pairs.size();
  while (left > 0) {
    std::vector<std::pair<int, int>> round;
    std::vector<int> busy;
    for (size_t i = 0; i < pairs.size(); i++) {
      if (placed[i]) continue;
      const auto [a, b] = pairs[i];
      if (std::find(busy.begin(), busy.end(), a) != busy.end() || std::find(busy.begin(), busy.end(), b) != busy.end())
        continue;
      round.push_back(pairs[i]);
      busy.push_back(a), busy.push_back(b);
      placed[i] = true;
      left--;
    }
    rounds.push_back(round);
  }
  return rounds;
}

namespace {
// The lower median of the positive values (0 without any).
double lower_median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !(x > 0); }), v.end());
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}
}  // namespace

std::vector<HostVerdict> judge_selfchecks(const std::vector<HostCheck>& checks, double gemm_margin) {
  std::vector<double> speeds, bandwidths;
  for (const auto& c : checks) {
    if (c.ran && c.gemm_ok) speeds.push_back(c.gemm_gflops);
    if (c.ran && c.allreduce_ok) bandwidths.push_back(c.allreduce_gbps);
  }
  const double median = lower_median(speeds), median_bw = lower_median(bandwidths);
  std::map<int, bool> own_ok;
  std::vector<HostVerdict> out;
  for (const auto& c : checks) {
    HostVerdict v{c.host, true, "", ""};
    if (!c.ran) v = {c.host, false, "its self-check processes did not report", "no report"};
    else if (c.not_run) v = {c.host, false, "self-check not run" + (c.detail.empty() ? "" : ": " + c.detail), "not run"};
    else if (!c.gemm_ok)
      v = {c.host, false, "GEMM check: wrong result" + (c.detail.empty() ? "" : " (" + c.detail + ")"), "wrong"};
    else if (median > 0 && c.gemm_gflops < (1.0 - gemm_margin) * median)
      v = {c.host, false, fmt::format("GEMM check: {:.1f} GFLOP/s, below {:.0f}% of the hosts' median {:.1f} GFLOP/s",
                                      c.gemm_gflops, 100.0 * (1.0 - gemm_margin), median), "slow"};
    else if (!c.allreduce_ok)
      v = {c.host, false, "all-reduce among its ranks failed" + (c.detail.empty() ? "" : ": " + c.detail), "wrong"};
    else if (median_bw > 0 && c.allreduce_gbps > 0 && c.allreduce_gbps < (1.0 - gemm_margin) * median_bw)
      v = {c.host, false, fmt::format("all-reduce among its ranks: {:.2f} GB/s, below {:.0f}% of the hosts' median "
                                      "{:.2f} GB/s", c.allreduce_gbps, 100.0 * (1.0 - gemm_margin), median_bw), "slow"};
    own_ok[c.host] = v.ok;
    out.push_back(v);
  }
  for (auto& v : out) {
    if (!v.ok) continue;
    const auto& c = *std::find_if(checks.begin(), checks.end(), [&](const HostCheck& x) { return x.host == v.host; });
    if (c.pairs.empty()) continue;
    bool any_pass = false, partners_ok = true;
    std::vector<int> partners;
    for (const auto& [p, ok] : c.pairs) {
      any_pass = any_pass || ok;
      partners_ok = partners_ok && own_ok.count(p) && own_ok[p];
      partners.push_back(p);
    }
    if (!any_pass && partners_ok)
      v = {v.host, false, fmt::format("all-reduce with its neighbour host(s) {} failed while they passed their own checks",
                                      fmt::join(partners, ", ")), "pair"};
  }
  return out;
}

namespace {
bool flag(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}
std::string text(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}
}  // namespace

bool result_passed_allreduce(const SelfCheckResult& r) { return flag(r.result, "allreduce_ok"); }

namespace {
// `megascale selfcheck` reports a requested check that could not run as "<check>_error": "not run: <why>".
bool not_run(const nlohmann::json& j, const char* error_key) { return text(j, error_key).rfind("not run", 0) == 0; }
}  // namespace

void add_host_results(HostCheck& c, const std::vector<SelfCheckResult>& results) {
  c.ran = true;
  c.allreduce_ok = true;
  c.gemm_ok = true;
  for (const SelfCheckResult& r : results) {
    const nlohmann::json& j = r.result;
    if (!j.is_object()) {
      c.allreduce_ok = false;
      c.not_run = true;
      c.detail = fmt::format("a self-check process wrote no result (exit code {})", r.exit_code);
      continue;
    }
    if (not_run(j, "gemm_error") || not_run(j, "allreduce_error")) {
      c.not_run = true;
      if (c.detail.empty()) c.detail = not_run(j, "gemm_error") ? text(j, "gemm_error") : text(j, "allreduce_error");
    }
    if (j.contains("gemm_ok") && !j["gemm_ok"].is_null()) {  // the process that ran the GEMM check
      c.gemm_ok = flag(j, "gemm_ok");
      c.gemm_gflops = j["gemm_gflops"].is_number() ? j["gemm_gflops"].get<double>() : 0.0;
      if (!c.gemm_ok) c.detail = text(j, "gemm_error");
    }
    if (j.contains("allreduce_gbps") && j["allreduce_gbps"].is_number())  // the same on every member
      c.allreduce_gbps = j["allreduce_gbps"].get<double>();
    if (!flag(j, "allreduce_ok")) {
      c.allreduce_ok = false;
      if (c.detail.empty()) c.detail = !text(j, "allreduce_error").empty() ? text(j, "allreduce_error") : text(j, "error");
    }
  }
}

}  // namespace ms::launch
