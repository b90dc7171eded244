// host_desc.cpp: see host_desc.h.
#include "plan/host_desc.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "base/check.h"

namespace ms::plan {

namespace {

const char* dtype_key(DType t) { return t == DType::kBF16 ? "bf16" : "fp32"; }

// Position of log(x) between grid points: index i and weight w of grid[i + 1] (clamped to the edges).
std::pair<size_t, double> bracket(const std::vector<double>& grid, double x) {
  if (grid.size() == 1 || x <= grid.front()) return {0, 0.0};
  if (x >= grid.back()) return {grid.size() - 2, 1.0};
  size_t i = 0;
  while (grid[i + 1] < x) i++;
  return {i, std::log(x / grid[i]) / std::log(grid[i + 1] / grid[i])};
}

double lerp_log(double a, double b, double w) { return std::exp((1 - w) * std::log(a) + w * std::log(b)); }

const std::vector<double>& table_of(const std::map<std::string, std::vector<double>>& m, const std::string& key,
                                    const char* what) {
  const auto it = m.find(key);
  MS_CHECK(it != m.end(), "plan: the host file has no {} table {} (re-run megascale plan --calibrate-host)", what, key);
  return it->second;
}

std::vector<double> numbers(const toml::node* n, const std::string& where, const std::string& key) {
  MS_CHECK(n && n->is_array(), "{}: {}: expected an array of numbers", where, key);
  std::vector<double> out;
  for (const toml::node& v : *n->as_array()) {
    MS_CHECK(v.is_number(), "{}: {}: expected an array of numbers", where, key);
    out.push_back(*v.value<double>());
  }
  return out;
}

double number(const toml::node* n, const std::string& where, const std::string& key) {
  MS_CHECK(n && n->is_number(), "{}: {}: expected a number", where, key);
  return *n->value<double>();
}

std::string array_text(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += fmt::format("{}{:.6g}", i ? ", " : "", v[i]);
  return s + "]";
}

void parse_thread_table(const toml::table& t, const std::string& where, HostThreadTables& out) {
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    if (key.rfind("gemm_", 0) == 0) {
      out.gemm[key.substr(5)] = numbers(&v, where, key);
    } else if (key.rfind("attention_", 0) == 0) {
      out.attention[key.substr(10)] = numbers(&v, where, key);
    } else if (key.size() > 5 && key.compare(key.size() - 5, 5, "_GBps") == 0) {
      out.kernel_GBps[key.substr(0, key.size() - 5)] = number(&v, where, key);
    } else if (key == "adamw_ns_per_param") {
      out.adamw_ns_per_param = number(&v, where, key);
    } else if (key == "lamb_ns_per_param") {
      out.lamb_ns_per_param = number(&v, where, key);
    } else {
      MS_FAIL("{}: unknown key '{}' (gemm_*, attention_*, *_GBps, adamw_ns_per_param, lamb_ns_per_param)", where, key);
    }
  }
}

}  // namespace

const HostThreadTables& HostTables::at(int t) const {
  MS_CHECK(!threads.empty(),
           "plan: the cluster has no measured host tables (a CPU host file from "
           "megascale plan --calibrate-host)");
  int use = threads.front();
  for (int x : threads)
    if (x <= t) use = x;
  return by_threads.at(use);
}

double HostTables::gemm_seconds(DType precision, int t, double m, double n, double k, bool backward) const {
  const std::vector<double>& g =
      table_of(at(t).gemm, fmt::format("{}_{}", dtype_key(precision), backward ? "bwd" : "fwd"), "GEMM");
  const size_t D = gemm_dims.size();
  const auto [im, wm] = bracket(gemm_dims, m);
  const auto [in, wn] = bracket(gemm_dims, n);
  const auto [ik, wk] = bracket(gemm_dims, k);
  auto val = [&](size_t a, size_t b, size_t c) {
    return g[(std::min(a, D - 1) * D + std::min(b, D - 1)) * D + std::min(c, D - 1)];
  };
  double log_rate = 0;
  for (int da = 0; da < 2; da++)
    for (int db = 0; db < 2; db++)
      for (int dc = 0; dc < 2; dc++) {
        const double w = (da ? wm : 1 - wm) * (db ? wn : 1 - wn) * (dc ? wk : 1 - wk);
        if (w > 0) log_rate += w * std::log(val(im + da, in + db, ik + dc));
      }
  const double flops = (backward ? 4.0 : 2.0) * m * n * k;
  return flops / (std::exp(log_rate) * 1e9);
}

double HostTables::attention_seconds(DType precision, int t, double flops, double seq, bool backward) const {
  const std::vector<double>& r =
      table_of(at(t).attention, fmt::format("{}_{}", dtype_key(precision), backward ? "bwd" : "fwd"), "attention");
  const auto [i, w] = bracket(attention_seq, seq);
  const double rate = attention_seq.size() == 1 ? r[0] : lerp_log(r[i], r[i + 1], w);
  return flops / (rate * 1e9);
}

double HostTables::kernel_rate_GBps(int t, const std::string& kernel) const {
  const auto& k = at(t).kernel_GBps;
  const auto it = k.find(kernel);
  MS_CHECK(it != k.end(), "plan: the host file has no {}_GBps (re-run megascale plan --calibrate-host)", kernel);
  return it->second;
}

bool HostTables::has_collective(const std::string& backend, const std::string& op) const {
  const auto b = comm.find(backend);
  return b != comm.end() && b->second.count(op) > 0;
}

double HostTables::optimizer_seconds(double params, bool lamb, int t) const {
  const HostThreadTables& x = at(t);
  return params * (lamb ? x.lamb_ns_per_param : x.adamw_ns_per_param) * 1e-9;
}

double HostTables::collective_seconds(const std::string& backend, const std::string& op, double bytes, int n) const {
  if (n <= 1 || bytes <= 0) return 0;
  const auto b = comm.find(backend);
  MS_CHECK(b != comm.end(), "plan: the host file has no [comm.{}] (re-run megascale plan --calibrate-host)", backend);
  const bool send = op == "send" || op == "send_busy";
  const std::string key = op == "send" ? "all_gather" : op == "send_busy" ? "all_gather_busy" : op;
  const auto f = b->second.find(key);
  MS_CHECK(f != b->second.end(), "plan: the host file's [comm.{}] has no {}", backend, key);
  const CommTable& c = f->second;
  if (send) bytes *= 2, n = 2;
  const bool ar = key.rfind("all_reduce", 0) == 0;
  const auto factor = [&](int k) { return ar ? 2.0 * (k - 1) / k : (k - 1.0) / k; };
  // The bus bytes per rank fix the time: the measured group's buffer that moves as many.
  const double x = bytes * factor(n) / factor(c.ranks);
  double us = 0;
  if (x >= c.bytes.back()) {
    us = c.us.back() * x / c.bytes.back();
  } else {
    const auto [i, w] = bracket(c.bytes, x);
    us = c.bytes.size() == 1 ? c.us[0] : lerp_log(c.us[i], c.us[i + 1], w);
  }
  return us * 1e-6;
}

void HostTables::validate(const std::string& where) const {
  if (empty()) return;
  auto ascending = [&](const auto& v, const char* key) {
    MS_CHECK(!v.empty(), "{}: [host] {}: empty", where, key);
    for (size_t i = 0; i < v.size(); i++)
      MS_CHECK(v[i] > 0 && (i == 0 || v[i] > v[i - 1]), "{}: [host] {}: values must be positive and ascending", where,
               key);
  };
  ascending(threads, "threads");
  ascending(gemm_dims, "gemm_dims");
  ascending(attention_seq, "attention_seq");
  MS_CHECK(process_floor_mib > 0 && rank_floor_mib > 0,
           "{}: [host] process_floor_mib and rank_floor_mib: missing or not > 0", where);
  const size_t D = gemm_dims.size();
  for (int t : threads) {
    const auto it = by_threads.find(t);
    MS_CHECK(it != by_threads.end(), "{}: [host] threads lists {} but there is no [host.t{}]", where, t, t);
    const HostThreadTables& x = it->second;
    for (const char* key : {"fp32_fwd", "fp32_bwd"}) {
      MS_CHECK(x.gemm.count(key), "{}: [host.t{}] gemm_{}: missing", where, t, key);
      MS_CHECK(x.attention.count(key), "{}: [host.t{}] attention_{}: missing", where, t, key);
    }
    for (const auto& [k, v] : x.gemm) {
      MS_CHECK(v.size() == D * D * D, "{}: [host.t{}] gemm_{}: {} values, expected {} (gemm_dims cubed)", where, t, k,
               v.size(), D * D * D);
      for (double r : v) MS_CHECK(r > 0, "{}: [host.t{}] gemm_{}: every rate must be > 0", where, t, k);
    }
    for (const auto& [k, v] : x.attention) {
      MS_CHECK(v.size() == attention_seq.size(), "{}: [host.t{}] attention_{}: {} values, expected {}", where, t, k,
               v.size(), attention_seq.size());
      for (double r : v) MS_CHECK(r > 0, "{}: [host.t{}] attention_{}: every rate must be > 0", where, t, k);
    }
    for (const char* k : {"layernorm_fwd", "layernorm_bwd", "gelu_fwd", "gelu_bwd", "cross_entropy", "stream"}) {
      const auto r = x.kernel_GBps.find(k);
      MS_CHECK(r != x.kernel_GBps.end() && r->second > 0, "{}: [host.t{}] {}_GBps: missing or not > 0", where, t, k);
    }
    MS_CHECK(x.adamw_ns_per_param > 0 && x.lamb_ns_per_param > 0,
             "{}: [host.t{}] adamw_ns_per_param and lamb_ns_per_param must be > 0", where, t);
  }
  for (const auto& [backend, ops] : comm)
    for (const auto& [op, c] : ops) {
      MS_CHECK(c.ranks >= 2, "{}: [comm.{}] {}: ranks must be >= 2", where, backend, op);
      MS_CHECK(!c.bytes.empty() && c.bytes.size() == c.us.size(),
               "{}: [comm.{}] {}: bytes and us must be non-empty and of one length", where, backend, op);
      for (size_t i = 0; i < c.bytes.size(); i++)
        MS_CHECK(c.bytes[i] > 0 && c.us[i] > 0 && (i == 0 || c.bytes[i] > c.bytes[i - 1]),
                 "{}: [comm.{}] {}: sizes must be ascending and times > 0", where, backend, op);
    }
}

HostTables parse_host_tables(const toml::table& t, const std::string& where) {
  HostTables h;
  if (const toml::node* host = t.get("host")) {
    MS_CHECK(host->is_table(), "{}: [host] must be a table", where);
    for (auto&& [k, v] : *host->as_table()) {
      const std::string key(k.str());
      if (key == "threads") {
        for (double x : numbers(&v, where + " [host]", key)) h.threads.push_back(static_cast<int>(x));
      } else if (key == "gemm_dims") {
        h.gemm_dims = numbers(&v, where + " [host]", key);
      } else if (key == "attention_seq") {
        h.attention_seq = numbers(&v, where + " [host]", key);
      } else if (key == "process_floor_mib") {
        h.process_floor_mib = number(&v, where + " [host]", key);
      } else if (key == "rank_floor_mib") {
        h.rank_floor_mib = number(&v, where + " [host]", key);
      } else if (key.size() > 1 && key[0] == 't' && v.is_table()) {
        const int n = std::atoi(key.c_str() + 1);
        MS_CHECK(n > 0, "{}: [host.{}]: expected t<threads>", where, key);
        parse_thread_table(*v.as_table(), fmt::format("{} [host.{}]", where, key), h.by_threads[n]);
      } else {
        MS_FAIL(
            "{}: [host] unknown key '{}' (threads, gemm_dims, attention_seq, process_floor_mib, rank_floor_mib, "
            "t<threads> tables)",
            where, key);
      }
    }
  }
  if (const toml::node* comm = t.get("comm")) {
    MS_CHECK(comm->is_table(), "{}: [comm] must be a table", where);
    for (auto&& [b, ops] : *comm->as_table()) {
      const std::string backend(b.str());
      MS_CHECK(backend == "gloo" || backend == "mpi", "{}: [comm.{}]: unknown backend (gloo, mpi)", where, backend);
      MS_CHECK(ops.is_table(), "{}: [comm.{}] must be a table", where, backend);
      for (auto&& [o, f] : *ops.as_table()) {
        const std::string op(o.str()), key = fmt::format("[comm.{}] {}", backend, op);
        const bool busy = op.size() > 5 && op.compare(op.size() - 5, 5, "_busy") == 0;
        const std::string base = busy ? op.substr(0, op.size() - 5) : op;
        MS_CHECK(base == "all_reduce" || base == "reduce_scatter" || base == "all_gather",
                 "{}: {}: unknown collective (all_reduce, reduce_scatter, all_gather, each optionally _busy)", where,
                 key);
        MS_CHECK(f.is_table(), "{}: {}: expected {{ ranks = ..., bytes = [...], us = [...] }}", where, key);
        CommTable c;
        c.ranks = static_cast<int>(number(f.as_table()->get("ranks"), where, key + ".ranks"));
        c.bytes = numbers(f.as_table()->get("bytes"), where, key + ".bytes");
        c.us = numbers(f.as_table()->get("us"), where, key + ".us");
        h.comm[backend][op] = c;
      }
    }
  }
  h.validate(where);
  return h;
}

std::string host_tables_toml(const HostTables& h) {
  std::ostringstream o;
  o << "[host]\n";
  o << "threads = [";
  for (size_t i = 0; i < h.threads.size(); i++) o << (i ? ", " : "") << h.threads[i];
  o << "]\n";
  o << "gemm_dims = " << array_text(h.gemm_dims) << "  # M, N and K of the GEMM tables (index (iM D + iN) D + iK)\n";
  o << "attention_seq = " << array_text(h.attention_seq) << "  # sequence lengths of the attention tables\n";
  o << fmt::format("process_floor_mib = {:.6g}  # peak RSS of a negligible model's training, alone\n",
                   h.process_floor_mib);
  o << fmt::format("rank_floor_mib = {:.6g}  # the same per rank of megascale launch over Gloo\n", h.rank_floor_mib);
  for (const auto& [t, x] : h.by_threads) {
    o << fmt::format("\n[host.t{}]  # {} thread(s) per rank\n", t, t);
    for (const auto& [k, v] : x.gemm) o << "gemm_" << k << " = " << array_text(v) << "\n";
    for (const auto& [k, v] : x.attention) o << "attention_" << k << " = " << array_text(v) << "\n";
    for (const auto& [k, v] : x.kernel_GBps) o << fmt::format("{}_GBps = {:.6g}\n", k, v);
    o << fmt::format("adamw_ns_per_param = {:.6g}\nlamb_ns_per_param = {:.6g}\n", x.adamw_ns_per_param,
                     x.lamb_ns_per_param);
  }
  for (const auto& [backend, ops] : h.comm) {
    o << fmt::format("\n[comm.{}]  # megascale bench comm: median microseconds by buffer size\n", backend);
    for (const auto& [op, c] : ops)
      o << fmt::format("{} = {{ ranks = {}, bytes = {}, us = {} }}\n", op, c.ranks, array_text(c.bytes),
                       array_text(c.us));
  }
  return o.str();
}

}  // namespace ms::plan
