// layout_runs: what the layout-equivalence tests share (data parallel, tensor parallel): a
// learnable token stream and a small config in a temporary folder, training runs as real
// processes (the megascale binary alone, under `megascale launch`, under mpirun), and the
// comparison of two runs: per-step losses from log.jsonl and the final weights from the exported
// Hugging Face model (the whole model, gathered when it was split).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/safetensors.h"
#include "common/test_util.h"
#include "data/token_shard.h"

namespace ms::testing {

inline std::string megascale_bin() { return beside_self("megascale", MEGASCALE_BINARY); }

// mpirun of the binary with n ranks on loopback, one OpenMP thread each.
inline std::string mpirun(int n) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,tcp "
         "OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo timeout 300 mpirun --oversubscribe -np " +
         std::to_string(n) + " -x OMP_NUM_THREADS=1 " + megascale_bin();
}
inline std::string launch(int n) { return megascale_bin() + " launch --nproc " + std::to_string(n) + " --"; }

// The config both layout suites train: a 2-layer, 4-head, C = 64 model over the 512 token ids of
// the stream (extra_model: more [model] lines), 6 AdamW steps at lr 1e-2 (warm-up 2, cosine to
// 1e-3) of a global batch of 8 sequences of seq_len tokens, batch_size per micro-batch, one thread
// per rank, 0.02 MiB ZeRO buckets (several per model).
inline std::string layout_config(int seq_len, int batch_size, const std::string& extra_model = "") {
  return "[model]\nn_layer = 2\nn_head = 4\nn_embd = 64\nvocab_size = 512\nmax_seq_len = " + std::to_string(seq_len) +
         "\n" + extra_model +
         "[optim]\nlr = 1e-2\nmin_lr = 1e-3\nwarmup_steps = 2\n"
         "[train]\nsteps = 6\nbatch_size = " + std::to_string(batch_size) + "\nseq_len = " + std::to_string(seq_len) +
         "\nglobal_batch = 8\neval_every = 0\neval_batches = 2\nsample_tokens = 0\nthreads = 1\nprogress = \"lines\"\n"
         "[parallel]\nbucket_mb = 0.02\n";
}

// A 4-rank data-parallel config for straggler runs: large enough that a step's forward takes
// milliseconds of CPU (segments under 1 ms are not judged, obs/straggler.h); one summary and window
// of 20 steps at a 10% margin: with 4 ranks on 2 (virtual) cores a clean rank's CPU time ran up to
// +15% over its peers for 8 of 10 steps (cores shared by the hypervisor or SMT), while an injected
// 20% stood at +17..22% in every step (docs/observability.md).
inline std::string straggler_config(int steps) {
  return "[model]\nn_layer = 4\nn_head = 4\nn_embd = 128\nvocab_size = 512\nmax_seq_len = 64\n"
         "[optim]\nlr = 1e-3\nwarmup_steps = 2\n"
         "[train]\nsteps = " + std::to_string(steps) + "\nbatch_size = 4\nseq_len = 64\nglobal_batch = 16\n"
         "eval_every = 0\nsample_tokens = 0\nthreads = 1\nprogress = \"lines\"\n"
         "[parallel]\ndp = 4\n"
         "[obs]\nsummary_every = 20\nstraggler_window = 20\nstraggler_margin = 0.1\n";
}

// How two runs differ.
struct RunDiff {
  size_t steps = 0;
  double loss_rel = 0;    // worst per-step relative loss difference
  double max_abs = 0;     // largest |w_a - w_b| over all weights
  double max_w = 0;       // largest |w_a|
  double rel_l2 = 0;      // ||w_a - w_b|| / ||w_a|| over all weights
  bool learned = false;   // run a's last loss is below its first
};

class LayoutRuns {
 public:
  // Writes data (a random permutation chain over 512 token ids) and `config_toml` (without the
  // [data] section, which is added here) into a fresh temporary folder.
  LayoutRuns(const std::string& tag, const std::string& config_toml) : dir_(make_temp_dir(tag)) {
    TestRng rng(5);
    std::vector<int> perm(512);
    for (int i = 0; i < 512; i++) perm[i] = i;
    for (int i = 511; i > 0; i--) std::swap(perm[i], perm[rng.next() % (i + 1)]);
    auto stream = [&](size_t n) {
      std::vector<uint16_t> t(n);
      int tok = 0;
      for (size_t i = 0; i < n; i++) {
        if (i % 97 == 0) tok = static_cast<int>(rng.next() % 512);
        t[i] = static_cast<uint16_t>(tok);
        tok = perm[tok];
      }
      return t;
    };
    write_token_shard(dir_ + "/train.bin", stream(40000));
    write_token_shard(dir_ + "/val.bin", stream(4000));
    std::ofstream(dir_ + "/cfg.toml") << config_toml << "\n[data]\ntrain = \"" << dir_ << "/train.bin\"\nval = \""
                                      << dir_ << "/val.bin\"\n";
  }
  ~LayoutRuns() { std::filesystem::remove_all(dir_); }

  const std::string& dir() const { return dir_; }

  // Runs `prefix train cfg --train.out_dir=dir/name extra`; expects success; returns the output.
  std::string train(const std::string& prefix, const std::string& name, const std::string& extra) const {
    const auto r = run_cmd(prefix + " train " + dir_ + "/cfg.toml --train.out_dir=" + dir_ + "/" + name + " " + extra);
    EXPECT_EQ(r.code, 0) << prefix << " " << extra << "\n" << r.output;
    return r.output;
  }

  std::vector<double> losses(const std::string& name) const {
    std::vector<double> out;
    std::ifstream f(dir_ + "/" + name + "/log.jsonl");
    std::string line;
    while (std::getline(f, line)) {
      auto j = nlohmann::json::parse(line);
      if (!j.contains("loss")) continue;
      out.push_back(j["loss"].get<double>());
      // Rank 0 writes the log and knows both MFU denominators (hardware peak, measured GEMM peak).
      EXPECT_TRUE(j.value("mfu", nlohmann::json()).is_number() && j["mfu"].get<double>() > 0) << line;
      EXPECT_TRUE(j.value("mfu_gemm", nlohmann::json()).is_number() && j["mfu_gemm"].get<double>() > 0) << line;
    }
    return out;
  }

  RunDiff diff(const std::string& a_name, const std::string& b_name) const {
    RunDiff d;
    const std::vector<double> a = losses(a_name), b = losses(b_name);
    d.steps = std::min(a.size(), b.size());
    EXPECT_EQ(a.size(), b.size()) << a_name << " vs " << b_name;
    for (size_t i = 0; i < d.steps; i++) d.loss_rel = std::max(d.loss_rel, std::fabs(b[i] - a[i]) / std::fabs(a[i]));
    d.learned = !a.empty() && a.back() < a.front();
    const StFile fa = load_safetensors(dir_ + "/" + a_name + "/model/model.safetensors");
    const StFile fb = load_safetensors(dir_ + "/" + b_name + "/model/model.safetensors");
    double num = 0, den = 0;
    for (const auto& [name, t] : fa.tensors) {
      const std::vector<double> x = t.to_f64(), y = fb.at(name).to_f64();
      EXPECT_EQ(x.size(), y.size()) << name;
      for (size_t i = 0; i < std::min(x.size(), y.size()); i++) {
        d.max_w = std::max(d.max_w, std::fabs(x[i]));
        d.max_abs = std::max(d.max_abs, std::fabs(x[i] - y[i]));
        num += (x[i] - y[i]) * (x[i] - y[i]);
        den += x[i] * x[i];
      }
    }
    d.rel_l2 = std::sqrt(num / den);
    std::printf("%s vs %s: losses within %.3g relative; max |dw| %.3g (max |w| %.3g), relative L2 %.3g\n",
                b_name.c_str(), a_name.c_str(), d.loss_rel, d.max_abs, d.max_w, d.rel_l2);
    return d;
  }

  // Run b follows run a: `steps` steps, losses within loss_rel, weights within weight_rel
  // (relative L2) and weight_abs (largest element difference; < 0: not checked); bit_exact: equal.
  void expect_same_run(const std::string& a, const std::string& b, size_t steps, double loss_rel, double weight_rel,
                       double weight_abs, bool bit_exact = false) const {
    const RunDiff d = diff(a, b);
    EXPECT_EQ(d.steps, steps) << b;
    EXPECT_TRUE(d.learned) << a << " did not learn: the comparison would be vacuous";
    EXPECT_LE(d.loss_rel, loss_rel) << b;
    EXPECT_LE(d.rel_l2, weight_rel) << b;
    if (weight_abs >= 0) {
      EXPECT_LE(d.max_abs, weight_abs) << b;
    }
    if (bit_exact) {
      EXPECT_EQ(d.max_abs, 0.0) << b;
      EXPECT_EQ(d.loss_rel, 0.0) << b;
    }
  }

 private:
  std::string dir_;
};

}  // namespace ms::testing
