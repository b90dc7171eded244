// ckpt_runs: what the checkpoint tests share: the pipeline suite's 8-layer model and learnable
// stream (parallel/pp_runs.h) trained as real processes, the per-step losses of a run folder (the
// last record of each step: a resumed run appends to log.jsonl), the checkpoint folder's `latest`,
// and the final exported weights compared byte for byte.
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
  explicit CkptRuns(const std::string& tag) : LayoutRuns(tag, pp_config()) {}

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

}  // namespace ms::testing
