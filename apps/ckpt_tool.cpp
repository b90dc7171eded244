// ckpt_tool.cpp: see ckpt_tool.h.
#include "ckpt_tool.h"

#include <cmath>  // std::isfinite
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "base/check.h"               // MS_CHECK
#include "ckpt/checkpoint_reader.h"   // CheckpointReader
#include "ckpt/checkpointer.h"        // checkpoint_step_of
#include "ckpt/manifest.h"            // parse_manifest
#include "ckpt/storage.h"             // LocalStorage
#include "config/config.h"            // Config, load_toml_text
#include "model/hf_export.h"          // export_hf
#include "model/param_layout.h"       // build_param_layout

namespace ms {

namespace fs = std::filesystem;

namespace {

// The step folder DIR names (itself, or its `latest`), split into storage root and folder name.
std::pair<std::string, std::string> locate(const std::string& dir) {
  const fs::path p = fs::absolute(dir).lexically_normal();
  const fs::path d = p.filename().empty() ? p.parent_path() : p;
  MS_CHECK(fs::is_directory(d), "{}: no such folder", dir);
  if (fs::exists(d / "manifest.json")) return {d.parent_path().string(), d.filename().string()};
  MS_CHECK(fs::exists(d / "latest"), "{}: neither a checkpoint (no manifest.json) nor a checkpoint folder (no latest)",
           dir);
  // At most a short name, never through a symlink.
  const std::string name = LocalStorage(d.string(), /*create=*/false).read_pointer("latest", 64);
  MS_CHECK(checkpoint_step_of(name) >= 0, "{}/latest does not name a step folder (step-<8 digits>)", dir);
  MS_CHECK(fs::exists(d / name / "manifest.json"), "{}/latest names '{}', which holds no manifest.json", dir, name);
  return {d.string(), name};
}

Config config_of(const Manifest& m, const std::string& where) {
  Config cfg;
  load_toml_text(cfg, m.config_toml, where + ": config");
  return cfg;
}

}  // namespace

int run_ckpt_inspect(const std::string& dir) {
  const auto [root, name] = locate(dir);
  const LocalStorage storage(root, /*create=*/false);
  const std::string where = root + "/" + name + "/manifest.json";
  const Manifest m = parse_manifest(storage.read_text(name + "/manifest.json"), where);
  fmt::print("checkpoint {}/{}\n", root, name);
  fmt::print("  format version {}, step {}, {} tokens, data at epoch {} sample {}\n", m.format_version, m.step,
             m.tokens, m.data.epoch, m.data.index);
  fmt::print("  saved by layout dp={} tp={} pp={} (virtual stages {}), model hash {}\n", m.dp, m.tp, m.pp,
             m.virtual_stages, m.model_hash);
  std::string model;
  for (const auto& [k, v] : m.model) model += fmt::format(" {}={}", k, v);
  fmt::print("  model:{}\n", model);
  uint64_t elems = 0;
  for (const auto& [n, t] : m.tensors) {
    uint64_t e = 1;
    for (int64_t d : t.shape) e *= static_cast<uint64_t>(d);
    elems += e;
  }
  fmt::print("  {} tensors, {} elements each of param / exp_avg / exp_avg_sq\n", m.tensors.size(), elems);
  const Config cfg = config_of(m, where);
  int bad = 0;
  // The tensors against the model its own config describes, both ways (what a resume checks
  // before copying anything).
  const std::string shapes = tensor_difference(m, cfg.model);
  if (!shapes.empty()) {
    fmt::print("  FAILED: the tensors do not match the model of the checkpoint's config: {}\n", shapes);
    bad++;
  }
  CheckpointReader reader(storage, name, m, cfg.model);
  for (const ManifestFile& f : m.files) {
    std::string status = "ok";
    try {
      reader.verify(f.name);
    } catch (const std::exception& e) {
      status = fmt::format("FAILED: {}", e.what());
      bad++;
    }
    fmt::print("  {:<36} rank {:>4} (dp {} tp {} pp {}) {:>12} bytes xxh64 {} {:>4} entries  {}\n", f.name, f.rank, f.dp,
               f.tp, f.pp, f.bytes, f.xxh64, f.entries.size(), status);
  }
  const size_t bad_files = static_cast<size_t>(bad) - (shapes.empty() ? 0 : 1);
  fmt::print("{}: {} of {} files verified{}\n", bad ? "FAILED" : "OK", m.files.size() - bad_files, m.files.size(),
             shapes.empty() ? "" : "; the tensors do not match the model");
  return bad ? 1 : 0;
}

void run_ckpt_export(const std::string& dir, const std::string& out) {
  const auto [root, name] = locate(dir);
  const LocalStorage storage(root, /*create=*/false);
  const std::string where = root + "/" + name + "/manifest.json";
  Manifest m = parse_manifest(storage.read_text(name + "/manifest.json"), where);
  const Config cfg = config_of(m, where);
  CheckpointReader reader(storage, name, std::move(m), cfg.model);
  const ParamLayout layout = build_param_layout(cfg.model);
  std::vector<float> params(layout.total);
  for (const ParamSpec& s : layout.specs) {
    const std::vector<float> w = reader.whole(s.name, StateKind::kParam);
    MS_CHECK(w.size() == s.numel(), "{}: tensor {} has {} elements, the model {}", where, s.name, w.size(), s.numel());
    for (float x : w) MS_CHECK(std::isfinite(x), "{}: tensor {} holds a non-finite value", where, s.name);
    std::copy(w.begin(), w.end(), params.begin() + static_cast<std::ptrdiff_t>(s.offset));
  }
  export_hf(cfg.model, params.data(), out);
  fmt::print("exported step {} of {}/{} to {} ({} parameters, Hugging Face GPT-2 safetensors + config.json)\n",
             reader.manifest().step, root, name, out, layout.total);
}

}  // namespace ms
