// ckpt_runs: what the checkpoint tests share: the pipeline suite's 8-layer model and learnable
// stream (parallel/pp_runs.h) trained as real processes, the per-step losses of a run folder (the
// last record of each step: a resumed run appends to log.jsonl), the checkpoint folder's `latest`,
// and the final exported weights compared byte for byte; the exact-resume check of every layout.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/layout_runs.h"
#include "common/test_util.h"
#include "parallel/pp_runs.h"

namespace ms::testing {

class CkptRuns : public LayoutRuns {
 public:
  explicit CkptRuns(const std::string& tag, const std::string& config = pp_config()) : LayoutRuns(tag, config) {}

  // `prefix train cfg --train.out_dir=dir/name extra`, any exit code.
  CmdResult run(const std::string& prefix, const std::string& name, const std::string& extra) const {
    return run_cmd(prefix + " train " + dir() + "/cfg.toml --train.out_dir=" + dir() + "/" + name + " " + extra);
  }

  // step -> loss, the last record of each step.
  std::map<int, double> step_losses(const std::string& name) const {
    std::map<int, double> out;
    std::ifstream f(dir() + "/" + name + "/log.jsonl");
    std::string line;
    while (std::getline(f, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("loss") && j.contains("step")) out[j["step"].get<int>()] = j["loss"].get<double>();
    }
    return out;
  }

  std::string latest(const std::string& name) const {
    std::string s = slurp(dir() + "/" + name + "/checkpoints/latest");
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  std::string ckpt(const std::string& name, int step) const {
    return dir() + "/" + name + "/checkpoints/" + fmt_step(step);
  }
  static std::string fmt_step(int step) {
    char b[32];
    std::snprintf(b, sizeof b, "step-%08d", step);
    return b;
  }

  // Every step of `a` from `from` on has the bit-identical loss in `b`, and b has nothing else from there.
  void expect_same_losses(const std::string& a, const std::string& b, int from, int to) const {
    const auto la = step_losses(a), lb = step_losses(b);
    for (int s = from; s <= to; s++) {
      ASSERT_TRUE(la.count(s) && lb.count(s)) << "step " << s << " missing in " << a << " or " << b;
      EXPECT_EQ(la.at(s), lb.at(s)) << "step " << s << ": " << a << " vs " << b;
    }
  }
  void expect_same_model(const std::string& a, const std::string& b) const {
    const std::string ma = slurp(dir() + "/" + a + "/model/model.safetensors");
    EXPECT_FALSE(ma.empty()) << a;
    EXPECT_TRUE(ma == slurp(dir() + "/" + b + "/model/model.safetensors")) << a << " vs " << b << ": final weights differ";
  }
};

// A run stopped after step 3 (saves every 2 steps) and resumed reproduces the uninterrupted run's
// losses and final weights bit for bit, and so does a resume from step 2's save, whose stage-1 copy
// ran beside step 3. prefix: how the binary runs (alone, launch, mpirun); layout: its flags;
// fault: MEGASCALE_FAULT for the interrupted run ("" = none); config: the model and run trained.
inline void exact_resume(const std::string& prefix, const std::string& layout, const std::string& precision,
                         const std::string& fault = "", const std::string& config = pp_config()) {
  CkptRuns runs("ckpt_exact", config);
  const std::string extra = layout + " --train.precision=" + precision;
  runs.train(prefix, "whole", extra);
  // Step 2's save is copied beside step 3's forward and backward (stage 1 overlapped); step 3's
  // is the stop's.
  const CmdResult first = runs.run((fault.empty() ? "" : "MEGASCALE_FAULT=" + fault + " ") + prefix, "split",
                                   extra + " --checkpoint.every=2 --train.exit_after=3");
  if (!fault.empty()) {
    EXPECT_NE(first.output.find("step 3: the optimizer waited"), std::string::npos) << first.output;
  }
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("stopped after step 3"), std::string::npos) << first.output;
  EXPECT_EQ(runs.latest("split"), "step-00000003");
  // The data position saved: 3 steps of the global batch of 8 sequences.
  const auto manifest = nlohmann::json::parse(slurp(runs.ckpt("split", 3) + "/manifest.json"));
  EXPECT_EQ(manifest["data"]["index"].get<int>(), 24);
  EXPECT_EQ(manifest["tokens"].get<int>(), 3 * 8 * 64);
  const std::string resumed = runs.train(prefix, "split", extra);
  EXPECT_NE(resumed.find("resumed from " + runs.ckpt("split", 3) + " (step 3"), std::string::npos) << resumed;
  EXPECT_EQ(runs.step_losses("split").size(), 6u);
  runs.expect_same_losses("whole", "split", 1, 6);
  runs.expect_same_model("whole", "split");
  // The overlapped copy of step 2 holds step 2's state exactly.
  runs.train(prefix, "from2", extra + " --train.resume=" + runs.ckpt("split", 2));
  runs.expect_same_losses("whole", "from2", 3, 6);
  runs.expect_same_model("whole", "from2");
}

}  // namespace ms::testing
