// synthetic_run: writes the record files of a made-up run (docs/observability.md "Record files") for
// the record reader and view tests: dp x tp x pp ranks laid out "tp-dp-pp", per step a data span,
// per micro-batch a forward and backward span with pipeline recv/send (matching seq on both ends)
// and a tp all-gather, an optimizer span, a dp all-reduce, a step line whose `ms` map sums the
// segments; optional noise, a slowed rank (forward), a one-off stall, overlapping spans, events.
// Counts of what was written are returned so tests compare against the truth.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/test_util.h"  // TestRng

namespace ms::testing {

struct SyntheticRun {
  int dp = 2, tp = 2, pp = 2;
  int steps = 12, micro = 2;
  double noise = 0.0;           // each span's duration x (1 + uniform(-noise, noise))
  int slow_rank = -1;           // this rank's forward spans take (1 + slow_ratio) longer
  double slow_ratio = 0.2;
  int slow_from = 0;            // ... from this step on
  int stall_rank = -1, stall_step = -1;  // a one-off: this rank's forwards of this step x (1 + stall_ratio)
  double stall_ratio = 0.5;
  bool overlap = false;         // add a span partly overlapping the first forward of each step
  uint64_t seed = 7;

  int world() const { return dp * tp * pp; }
  int rank_of(int t, int d, int p) const { return t + tp * (d + dp * p); }
};

struct SyntheticCounts {
  std::map<int, size_t> spans, comms, steps, events;  // per rank
  size_t sends = 0;
};

inline std::string pp_group(int d, int t) { return fmt::format("pp[dp={},tp={}]", d, t); }
inline std::string tp_group(int d, int p) { return fmt::format("tp[dp={},pp={}]", d, p); }
inline std::string dp_group(int t, int p) { return fmt::format("dp[tp={},pp={}]", t, p); }

// Writes dir/records/rank-RRRRR.jsonl for every rank; returns what was written.
inline SyntheticCounts write_synthetic_run(const std::string& dir, const SyntheticRun& cfg) {
  namespace fs = std::filesystem;
  using nlohmann::json;
  fs::create_directories(dir + "/records");
  SyntheticCounts counts;
  const int64_t kMs = 1000000;
  const int64_t F = 2 * kMs, B = 4 * kMs, O = kMs, D = kMs / 10, X = kMs / 5;  // durations
  const int64_t step_len = (cfg.micro + cfg.pp) * (F + B) * 2 + 10 * kMs;
  for (int p = 0; p < cfg.pp; p++)
    for (int d = 0; d < cfg.dp; d++)
      for (int t = 0; t < cfg.tp; t++) {
        const int rank = cfg.rank_of(t, d, p);
        TestRng rng(cfg.seed * 1000 + rank);
        auto jitter = [&](int64_t ns) {
          return static_cast<int64_t>(static_cast<double>(ns) * (1.0 + cfg.noise * rng.uniform(-1.0f, 1.0f)));
        };
        std::ofstream f(fmt::format("{}/records/rank-{:05d}.jsonl", dir, rank));
        json groups;
        {
          std::vector<int> g;
          for (int q = 0; q < cfg.pp; q++) g.push_back(cfg.rank_of(t, d, q));
          groups[pp_group(d, t)] = g;
          g.clear();
          for (int q = 0; q < cfg.tp; q++) g.push_back(cfg.rank_of(q, d, p));
          groups[tp_group(d, p)] = g;
          g.clear();
          for (int q = 0; q < cfg.dp; q++) g.push_back(cfg.rank_of(t, q, p));
          groups[dp_group(t, p)] = g;
        }
        f << json{{"type", "header"}, {"format", 1}, {"rank", rank}, {"world", cfg.world()},
                  {"coord", {{"tp", t}, {"dp", d}, {"pp", p}}}, {"order", "tp-dp-pp"},
                  {"shape", {{"tp", cfg.tp}, {"dp", cfg.dp}, {"pp", cfg.pp}}}, {"host", "synthetic"},
                  {"pid", 1000 + rank}, {"backend", "gloo"}, {"groups", groups},
                  {"clock", {{"offset_ns", 1000 * rank}, {"rtt_ns", 5000}}}, {"unix_ns", 1700000000000000000LL}}
                 .dump()
          << "\n";
        f << json{{"type", "clock"}, {"step", 0}, {"offset_ns", 1000 * rank}, {"rtt_ns", 5000}}.dump() << "\n";
        auto span = [&](const std::string& name, int step, int mb, int chunk, int64_t t0, int64_t t1) {
          f << json{{"type", "span"}, {"seg", name.substr(0, name.find(' '))}, {"name", name}, {"step", step},
                    {"mb", mb}, {"chunk", chunk}, {"t0", t0}, {"t1", t1}}
                   .dump()
            << "\n";
          counts.spans[rank]++;
        };
        auto comm = [&](const std::string& seg, const std::string& op, const std::string& group, int64_t seq,
                        int peer, int peer_world, int step, int64_t t0, int64_t t1) {
          f << json{{"type", "comm"}, {"seg", seg}, {"op", op}, {"group", group}, {"seq", seq}, {"bytes", 4096},
                    {"peer", peer}, {"peer_world", peer_world}, {"step", step}, {"tq", t0 - 1000}, {"t0", t0},
                    {"t1", t1}, {"status", "ok"}}
                   .dump()
            << "\n";
          counts.comms[rank]++;
          if (op == "send") counts.sends++;
        };
        int64_t tp_seq = 0, dp_seq = 0;
        for (int s = 0; s < cfg.steps; s++) {
          std::map<std::string, double> ms;
          auto add = [&](const std::string& seg, int64_t ns) { ms[seg] += static_cast<double>(ns) / 1e6; };
          const int64_t t_step = 1000000 + s * step_len + p * F;
          int64_t c = t_step;
          const int64_t dd = jitter(D);
          span("data", s, -1, -1, c, c + dd);
          add("data", dd);
          c += dd + X;
          for (int mb = 0; mb < cfg.micro; mb++) {
            const int64_t seq = s * cfg.micro + mb;
            if (p > 0) {
              comm("pp-recv", "recv", pp_group(d, t), seq, p - 1, cfg.rank_of(t, d, p - 1), s, c, c + X);
              add("pp-recv", X);
              c += X;
            }
            double slow = 1.0;
            if (rank == cfg.slow_rank && s >= cfg.slow_from) slow += cfg.slow_ratio;
            if (rank == cfg.stall_rank && s == cfg.stall_step) slow += cfg.stall_ratio;
            const int64_t fd = static_cast<int64_t>(static_cast<double>(jitter(F)) * slow);
            span(fmt::format("forward {}.0", mb), s, mb, 0, c, c + fd);
            if (cfg.overlap && mb == 0) span("eval overlapping", s, -1, -1, c + fd / 2, c + fd + X);
            if (cfg.tp > 1) {
              comm("tp-all-gather", "all_gather", tp_group(d, p), tp_seq++, -1, -1, s, c + fd / 4, c + fd / 4 + X);
              add("tp-all-gather", X);
            }
            add("forward", fd);
            c += fd;
            if (p + 1 < cfg.pp) {
              comm("pp-send", "send", pp_group(d, t), seq, p + 1, cfg.rank_of(t, d, p + 1), s, c, c + X);
              add("pp-send", X);
              c += X;
            }
          }
          for (int mb = 0; mb < cfg.micro; mb++) {
            const int64_t seq = s * cfg.micro + mb;
            if (p + 1 < cfg.pp) {
              comm("pp-recv", "recv", pp_group(d, t), seq, p + 1, cfg.rank_of(t, d, p + 1), s, c, c + X);
              add("pp-recv", X);
              c += X;
            }
            const int64_t bd = jitter(B);
            span(fmt::format("backward {}.0", mb), s, mb, 0, c, c + bd);
            add("backward", bd);
            c += bd;
            if (p > 0) {
              comm("pp-send", "send", pp_group(d, t), seq, p - 1, cfg.rank_of(t, d, p - 1), s, c, c + X);
              add("pp-send", X);
              c += X;
            }
          }
          if (cfg.dp > 1) {
            comm("dp-all-reduce", "all_reduce", dp_group(t, p), dp_seq++, -1, -1, s, c, c + X);
            add("dp-all-reduce", X);
            c += X;
          }
          const int64_t od = jitter(O);
          span("optimizer", s, -1, -1, c, c + od);
          add("optimizer", od);
          c += od;
          json jm(ms);
          json line = {{"type", "step"}, {"step", s}, {"t0", t_step}, {"t1", c}, {"lr", 1e-3}, {"tokens_per_s", 1000.0},
                       {"mfu", 0.1}, {"ms", jm}};
          line["loss"] = p + 1 == cfg.pp ? json(3.0 - 0.1 * s) : json(nullptr);
          line["mfu_gemm"] = rank == 0 ? json(0.3) : json(nullptr);  // only rank 0 measures the peaks
          f << line.dump() << "\n";
          counts.steps[rank]++;
          if (s % 5 == 4) {
            f << json{{"type", "event"}, {"name", "checkpoint saved"}, {"step", s}, {"t", c},
                      {"detail", "step-" + std::to_string(s)}}
                     .dump()
              << "\n";
            counts.events[rank]++;
          }
        }
      }
  return counts;
}

}  // namespace ms::testing
