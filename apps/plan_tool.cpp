// plan_tool.cpp: see plan_tool.h.
#include "plan_tool.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "config/config.h"       // Config, load_toml
#include "base/atomic_file.h"    // write_text_atomic
#include "plan/layout_search.h"  // search_layouts
#include "plan/runnable.h"       // trainer_refusal, trainer_overrides
#include "plan/plan_interval.h"  // plan_interval
#include "plan/plan_trace.h"     // plan_trace
#include "plan/step_model.h"     // predict_step
#include "plan_calibrate.h"      // run_calibrate_host

namespace ms {

namespace {

// Whether every layout field is given (else the search fills the missing ones).
bool explicit_layout(const PlanArgs& a) {
  return a.tp > 0 && a.pp > 0 && a.virtual_stages > 0 && a.micro_batch > 0 && !a.schedule.empty();
}

const std::vector<std::string> kRecomputeNames = {"none", "selective", "full"};  // plan::Recompute's order

// The position of `value` among a flag's choices, else a named error ("plan: --dtype x (bf16, fp16
// or fp32)").
size_t choice(const std::string& value, const char* flag, const std::vector<std::string>& choices) {
  std::string listed;
  for (size_t i = 0; i < choices.size(); i++) {
    if (value == choices[i]) return i;
    listed += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  }
  MS_FAIL("plan: {} {} ({})", flag, value, listed);
}

// The features, and the layout fields that were given.
plan::PlanLayout layout_of(const PlanArgs& a, const Config& cfg) {
  MS_CHECK(a.gpus > 0 && a.batch > 0, "plan: --gpus and --batch are required");
  plan::PlanLayout l;
  if (explicit_layout(a)) {
    MS_CHECK(a.gpus % (a.tp * a.pp) == 0, "plan: --gpus {} is not a multiple of tp {} x pp {}", a.gpus, a.tp, a.pp);
    l.tp = a.tp, l.pp = a.pp, l.dp = a.gpus / (a.tp * a.pp), l.virtual_stages = a.virtual_stages;
    l.micro_batch = a.micro_batch;
    l.schedule = choice(a.schedule, "--schedule", {"1f1b", "interleaved"}) == 0 ? PipelineScheduleKind::k1F1B
                                                                                : PipelineScheduleKind::kInterleaved;
  }
  l.global_batch = a.batch, l.seq = a.seq_len > 0 ? a.seq_len : cfg.train.seq_len;
  l.saves_checkpoints = cfg.checkpoint.every > 0 || cfg.train.exit_after > 0;
  const DType dtypes[] = {DType::kBF16, DType::kF16, DType::kF32};
  l.precision = dtypes[choice(a.dtype, "--dtype", {"bf16", "fp16", "fp32"})];
  l.sequence_parallel = choice(a.sequence_parallel, "--sequence-parallel", {"on", "off"}) == 0;
  l.pp_scatter_gather = choice(a.pp_scatter_gather, "--pp-scatter-gather", {"on", "off"}) == 0;
  l.recompute = static_cast<plan::Recompute>(choice(a.recompute, "--recompute", kRecomputeNames));
  MS_CHECK(a.zero >= 0 && a.zero <= 2, "plan: --zero {} (0, 1 or 2)", a.zero);
  l.zero = a.zero;
  std::set<std::string> overlap;
  std::stringstream items(a.overlap);
  for (std::string x; std::getline(items, x, ',');) {
    MS_CHECK(x == "none" || x == "tp-bwd" || x == "tp" || x == "pp" || x == "dp",
             "plan: --overlap item '{}' (none or a list of tp-bwd, tp, pp, dp)", x);
    overlap.insert(x);
  }
  l.overlap_tp_bwd = overlap.count("tp-bwd"), l.overlap_tp = overlap.count("tp");
  l.overlap_pp = overlap.count("pp"), l.overlap_dp = overlap.count("dp");
  l.tp_chunks = a.tp_chunks;
  l.attention = choice(a.kernels, "--kernels", {"megatron", "megascale"}) == 0 ? plan::AttentionImpl::kUnfused
                                                                               : plan::AttentionImpl::kFlash;
  l.data_async = choice(a.data_pipeline, "--data-pipeline", {"sync", "async"}) == 1;
  l.grad_reduce_fp32 = choice(a.grad_reduce, "--grad-reduce", {"fp32", "weights"}) == 0;
  l.lamb = choice(a.optimizer, "--optimizer", {"adam", "lamb"}) == 1;
  l.threads = cfg.train.threads, l.bucket_mb = cfg.parallel.bucket_mb;
  l.comm_backend = cfg.parallel.backend == BackendChoice::kMpi ? "mpi" : "gloo";
  return l;
}

// `--section.key=value` / `--section.key value` overrides after a positional config.
void apply_command_line(Config& cfg, const std::vector<std::string>& extras) {
  std::vector<std::pair<std::string, std::string>> kv;
  for (size_t i = 0; i < extras.size(); i++) {
    const std::string& x = extras[i];
    MS_CHECK(x.rfind("--", 0) == 0 && x.find('.') != std::string::npos,
             "plan: unexpected argument '{}' (overrides are --section.key=value)", x);
    const size_t eq = x.find('=');
    if (eq != std::string::npos) {
      kv.emplace_back(x.substr(2, eq - 2), x.substr(eq + 1));
    } else {
      MS_CHECK(i + 1 < extras.size(), "plan: override {} has no value", x);
      kv.emplace_back(x.substr(2), extras[i + 1]);
      i++;
    }
  }
  apply_overrides(cfg, kv, "command line");
}

// A training config's layout and features as the flags would give them (flags given win).
void layout_from_config(PlanArgs& a, Config& cfg, const CLI::App& cmd) {
  MS_CHECK(a.gpus > 0, "plan: --gpus (the run's ranks) is required");
  if (cfg.data.train.empty()) cfg.data.train = "(no data: planning)";  // the data never affects the plan
  cfg.resolve_layout(a.gpus);  // validates; dp and grad_accum as the trainer resolves them
  const ParallelConfig& p = cfg.parallel;
  auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  if (!given("--tp")) a.tp = p.tp;
  if (!given("--pp")) a.pp = p.pp;
  if (!given("--virtual-stages")) a.virtual_stages = p.virtual_stages;
  if (!given("--schedule")) a.schedule = p.schedule == PipelineScheduleKind::k1F1B ? "1f1b" : "interleaved";
  if (!given("--micro-batch")) a.micro_batch = cfg.train.batch_size;
  if (!given("--batch")) a.batch = cfg.train.batch_size * cfg.train.grad_accum * p.dp;
  if (!given("--dtype")) a.dtype = cfg.train.precision == DType::kBF16 ? "bf16" : "fp32";
  if (!given("--sequence-parallel")) a.sequence_parallel = p.sequence_parallel ? "on" : "off";
  if (!given("--tp-chunks")) a.tp_chunks = p.tp_chunks;
  if (!given("--optimizer")) a.optimizer = cfg.optim.name == OptimizerKind::kLamb ? "lamb" : "adam";
  if (!given("--overlap")) {
    a.overlap = p.tp_chunks > 1 ? "tp" : "tp-bwd";
    if (p.pp_decoupled) a.overlap += ",pp";
    if (p.overlap) a.overlap += ",dp";
  }
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

const std::string& recompute_name(plan::Recompute r) { return kRecomputeNames[static_cast<size_t>(r)]; }

nlohmann::json to_json(const plan::StepPrediction& p, const plan::PlanLayout& l, const plan::ClusterDesc& c) {
  const plan::MemoryEstimate& m = p.memory;
  const plan::PlanInterval iv = plan::plan_interval(p.step_s, p.mfu, c.uncertainty);
  const nlohmann::json interval =
      iv.known ? nlohmann::json{{"step_time_s", {iv.step_lo, iv.step_hi}}, {"mfu", {iv.mfu_lo, iv.mfu_hi}},
                                {"basis", iv.basis}}
               : nlohmann::json(nullptr);
  return {{"step_time_s", p.step_s},
          {"interval", interval},
          {"tokens_per_s", p.tokens_per_s},
          {"mfu", p.mfu},
          {"mfu_convention", "megatron-72"},
          // A CPU host's file holds its measurements; a GPU cluster its [efficiency] fit.
          {"calibrated", c.device.kind == "cpu" || !c.efficiency.empty()},
          {"fits_memory", m.fits},
          {"memory_per_device_gib",
           {{"params", m.params / kGiB},
            {"grads", m.grads / kGiB},
            {"optimizer", m.optimizer / kGiB},
            {"activations", m.activations / kGiB},
            {"other", m.other / kGiB},
            {"total", m.total() / kGiB},
            {"largest", m.largest},
            {"stage", m.stage}}},
          {"time_split_s",
           {{"compute", p.compute},
            {"recompute", p.recompute},
            {"tp_exposed", p.tp_exposed},
            {"pp_exposed", p.pp_exposed},
            {"dp_exposed", p.dp_exposed},
            {"bubble", p.bubble},
            {"optimizer", p.optimizer},
            {"other", p.other},
            {"straggler", p.straggler},
            {"spine", p.spine}}},
          {"layout",
           {{"tp", l.tp},
            {"pp", l.pp},
            {"dp", l.dp},
            {"virtual_stages", l.virtual_stages},
            {"micro_batch", l.micro_batch},
            {"recompute", recompute_name(l.recompute)},
            {"schedule", l.schedule == PipelineScheduleKind::k1F1B ? "1f1b" : "interleaved"}}},
          {"cluster",
           {{"name", c.device.name},
            {"devices_per_node", c.node.devices_per_node},
            {"intra_GBps", c.node.intra_GBps},
            {"nic_Gbps", c.network.nic_Gbps}}}};
}

}  // namespace

void add_plan_command(CLI::App& app, PlanArgs& a) {
  CLI::App* cmd =
      app.add_subcommand("plan",
                         "predict step time, MFU and memory per device of a layout on a cluster "
                         "(planner; layout flags left out are searched; --calibrate-host measures this machine)");
  cmd->add_option("config", a.config,
                  "a whole training config; --section.key=value overrides may follow, and its [train], "
                  "[parallel] and [optim] give the layout");
  cmd->add_option("--model", a.model, "a training config, or a file with its [model] section");
  cmd->allow_extras();
  cmd->add_option("--cluster", a.cluster, "a100-80g, h100-80g, h200-141g, or a cluster TOML file")->capture_default_str();
  cmd->add_option("--gpus", a.gpus, "devices in the job (on a CPU host: ranks)");
  cmd->add_option("--batch", a.batch, "global batch, sequences");
  cmd->add_option("--seq-len", a.seq_len, "sequence length (default: the config's train.seq_len)");
  cmd->add_option("--tp", a.tp, "tensor parallel size");
  cmd->add_option("--pp", a.pp, "pipeline stages");
  cmd->add_option("--virtual-stages", a.virtual_stages, "model chunks per stage");
  cmd->add_option("--schedule", a.schedule, "1f1b or interleaved");
  cmd->add_option("--micro-batch", a.micro_batch, "sequences per micro-batch");
  cmd->add_option("--dtype", a.dtype, "bf16, fp16 or fp32")->capture_default_str();
  cmd->add_option("--sequence-parallel", a.sequence_parallel, "on or off")->capture_default_str();
  cmd->add_option("--pp-scatter-gather", a.pp_scatter_gather,
                  "on: a pipeline send carries 1/tp of the activation "
                  "per rank (Megatron's default)")
      ->capture_default_str();
  cmd->add_option("--recompute", a.recompute,
                  "none, selective or full (searched when the layout is and it is not "
                  "given)")
      ->capture_default_str();
  cmd->add_option("--top", a.top, "searching: print the K best layouts")->capture_default_str();
  cmd->add_option("--zero", a.zero, "ZeRO stage 0, 1 or 2")->capture_default_str();
  cmd->add_option("--overlap", a.overlap, "none, or a list of tp-bwd, tp, pp, dp")->capture_default_str();
  cmd->add_option("--tp-chunks", a.tp_chunks, "chunks of MegaScale's TP overlap")->capture_default_str();
  cmd->add_option("--kernels", a.kernels, "megatron (unfused attention) or megascale (FlashAttention)")
      ->capture_default_str();
  cmd->add_option("--data-pipeline", a.data_pipeline, "sync or async")->capture_default_str();
  cmd->add_option("--grad-reduce", a.grad_reduce,
                  "the gradients' dtype over data parallelism: fp32 (megascale; Megatron with bf16) or weights "
                  "(the weights' dtype: Megatron's fp16 default)")
      ->capture_default_str();
  cmd->add_option("--optimizer", a.optimizer, "adam or lamb")->capture_default_str();
  cmd->add_flag("--json", a.json, "print one JSON object");
  cmd->add_flag("--calibrate-host", a.calibrate_host, "measure this CPU host and write its cluster file (--out)");
  cmd->add_option("--ranks", a.ranks, "--calibrate-host: ranks of the collective measurements")->capture_default_str();
  cmd->add_option("--out", a.out, "--calibrate-host: the host file to write");
  cmd->add_flag("--quick", a.quick, "--calibrate-host: a small grid (seconds; for tests)");
  cmd->add_option("--device", a.device,
                  "--calibrate-host: cpu (this host's ranks) or cuda (this machine's GPU: its compute constants "
                  "into the --cluster description, else the built-in one its name gives)")
      ->capture_default_str();
  cmd->add_option("--explain", a.explain,
                  "also write the predicted step as a Chrome trace (as `megascale trace` "
                  "writes measured ones)");
}

int run_plan_command(const CLI::App& app, PlanArgs a) {
  if (!app.got_subcommand("plan")) return -1;
  const CLI::App& cmd = *app.get_subcommand("plan");
  if (a.calibrate_host) {
    CalibrateHostArgs c;
    c.ranks = a.ranks, c.out = a.out, c.quick = a.quick, c.device = a.device;
    if (cmd.count("--cluster")) c.cluster = a.cluster;
    return run_calibrate_host(c);
  }
  a.recompute_given = cmd.count("--recompute") > 0;
  MS_CHECK(a.config.empty() != a.model.empty(), "plan: give a training config (positional) or --model, one of them");
  Config cfg;
  load_toml(cfg, a.config.empty() ? a.model : a.config);
  if (!a.config.empty()) {
    apply_command_line(cfg, cmd.remaining());
    layout_from_config(a, cfg, cmd);
  } else {
    MS_CHECK(cmd.remaining().empty(), "plan: unexpected arguments (overrides need a positional config): {}",
             fmt::join(cmd.remaining(), " "));
  }
  const plan::ClusterDesc cluster = plan::load_cluster(a.cluster);
  plan::PlanLayout l = layout_of(a, cfg);
  plan::StepPrediction p;
  int candidates = 0, fitting = 0;
  std::vector<std::pair<plan::PlanLayout, plan::StepPrediction>> others;
  if (explicit_layout(a)) {
    p = plan::predict_step(cfg.model, l, cluster, plan::plan_constants(cluster));
  } else {  // the layout search, keeping what was given
    plan::SearchSpace space;
    space.gpus = a.gpus, space.fixed = l, space.tp = a.tp, space.pp = a.pp, space.virtual_stages = a.virtual_stages;
    space.micro_batch = a.micro_batch, space.search_recompute = !a.recompute_given;
    plan::SearchResult r =
        plan::search_layouts(cfg.model, space, cluster, plan::plan_constants(cluster), std::max(1, a.top));
    l = r.best.front().first, p = r.best.front().second, candidates = r.candidates, fitting = r.fitting;
    others.assign(r.best.begin() + 1, r.best.end());
  }
  if (!a.explain.empty()) write_text_atomic(a.explain, plan::plan_trace(p, l.pp).dump() + "\n");
  if (a.json) {
    nlohmann::json j = to_json(p, l, cluster);
    j["train_overrides"] = plan::trainer_overrides(l);
    j["trainer_refusal"] = plan::trainer_refusal(cfg.model, l);
    if (candidates > 0) {
      j["searched"] = {{"candidates", candidates}, {"fitting", fitting}};
      for (const auto& [ol, op] : others) j["alternatives"].push_back(to_json(op, ol, cluster));
    }
    fmt::print("{}\n", j.dump());
    return 0;
  }
  if (candidates > 0)
    fmt::print("searched {} layouts, {} fit; the best{}:\n", candidates, fitting,
               others.empty() ? "" : fmt::format(" (then {} more below)", others.size()));
  fmt::print("layout tp {} pp {} dp {} v {} micro-batch {} recompute {} on {} x {} ({})\n", l.tp, l.pp, l.dp,
             l.virtual_stages, l.micro_batch, recompute_name(l.recompute), a.gpus, cluster.device.name,
             cluster.device.kind == "cpu"                                       ? "this host's measured tables"
             : cluster.efficiency.empty()                                       ? "constants NOT calibrated"
             : cluster.efficiency.count("intra_eta") || cluster.efficiency.count("nic_eta")
                 ? "calibrated constants"
                 : "compute constants calibrated, communication NOT");
  fmt::print("step {:.3f} s, {:.0f} tokens/s, MFU {:.1f}% (megatron-72)\n", p.step_s, p.tokens_per_s, 100 * p.mfu);
  if (const plan::PlanInterval iv = plan::plan_interval(p.step_s, p.mfu, cluster.uncertainty); iv.known)
    fmt::print("range: step {:.3f}-{:.3f} s, MFU {:.1f}-{:.1f}% (one held-out RMS either side: {})\n", iv.step_lo,
               iv.step_hi, 100 * iv.mfu_lo, 100 * iv.mfu_hi, iv.basis);
  else
    fmt::print("range: unknown ({} has no [uncertainty]: never validated on data it was not fitted to)\n",
               cluster.source);
  fmt::print(
      "split: compute {:.3f}, recompute {:.3f}, tp {:.3f}, bubble {:.3f}, pp {:.3f}, dp {:.3f}, optimizer {:.3f}, "
      "other {:.3f}, straggler {:.3f}, spine {:.3f} s\n",
      p.compute, p.recompute, p.tp_exposed, p.bubble, p.pp_exposed, p.dp_exposed, p.optimizer, p.other, p.straggler,
      p.spine);
  fmt::print("memory per device (stage {}): {:.1f} GiB of {:.0f} ({}; largest: {})\n", p.memory.stage,
             p.memory.total() / kGiB, cluster.device.memory_gib, p.memory.fits ? "fits" : "does NOT fit",
             p.memory.largest);
  const std::string refusal = plan::trainer_refusal(cfg.model, l);
  if (refusal.empty())
    fmt::print("run it: megascale launch --nproc {} -- train CONFIG.toml {}\n", l.tp * l.pp * l.dp,
               plan::trainer_overrides(l));
  else
    fmt::print("the trainer would refuse this layout: {}\n", refusal);
  for (const auto& [ol, op] : others)
    fmt::print("  tp {} pp {} dp {} v {} micro-batch {} recompute {}: step {:.3f} s, MFU {:.1f}%\n", ol.tp, ol.pp,
               ol.dp, ol.virtual_stages, ol.micro_batch, recompute_name(ol.recompute), op.step_s, 100 * op.mfu);
  return 0;
}

}  // namespace ms
