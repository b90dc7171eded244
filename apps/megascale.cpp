// megascale: the one binary. Subcommands only wire library components together:
//   megascale prepare INPUT... --out DIR [--tokenizer FILE]   text files / folders -> token shards (GPT-2 BPE or a tokenizer.json)
//   megascale train [CONFIG.toml] [--section.key=value ...]   train a GPT (see --help for every key)
//   megascale launch --nproc N [--store file|redis|redis://h:p] -- CMD...   N local ranks of CMD
//   megascale launch --hosts localhost*3 --nproc-per-host 2 -- CMD...   a driven job: executors, heartbeats, automatic restart
//   megascale ckpt inspect DIR | ckpt export DIR OUT   verify a checkpoint / write it as a Hugging Face folder
//   megascale trace RUN_DIR | heatmap RUN_DIR   merged Chrome trace / heatmaps + straggler report of a run's records
//   megascale diagnose RUN_DIR   the hang report: which ranks never entered the collective the others wait in
//   megascale bench comm [--ranks 8,16,32] [--store file,redis] [--sizes 4K..64M]   comm start-up and bandwidth
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>   // CLI::App
#include <fmt/format.h>  // fmt::print
#include <fmt/ranges.h>  // fmt::join

#include "base/check.h"    // ms::Error
#include "base/log.h"      // ms::logger
#include "bench_comm.h"     // CommBenchOptions, run_comm_bench, run_comm_bench_worker
#include "ckpt_tool.h"      // run_ckpt_inspect, run_ckpt_export
#include "diagnose_tool.h"  // run_diagnose
#include "report_tools.h"   // add_report_commands, run_report_command (trace, heatmap)
#include "plan_tool.h"  // add_plan_command, run_plan_command
#include "selfcheck_tool.h"  // add_selfcheck_command, run_selfcheck_command
#include "config/config.h"   // Config, list_fields, set_field, load_toml
#include "launch_cli.h"      // LaunchArgs, add_launch_commands, run_launch_command
#include "launch/janitor.h"  // janitor_main (the hidden `megascale janitor`)
#include "launch/standby.h"  // await_standby_assignment
#include "data/prepare.h"  // PrepareOptions, run_prepare
#include "train_run.h"    // run_training
#include "app_paths.h"    // tokenizer_dir_or_default, resolve_launch_command

namespace {

void add_prepare(CLI::App& app, ms::PrepareOptions& opt) {
  CLI::App* cmd = app.add_subcommand("prepare", "tokenize text files or folders into llm.c token shards (GPT-2 BPE or a "
                                     "Hugging Face tokenizer.json)");
  cmd->add_option("inputs", opt.inputs, "text files or folders (the Brown corpus folder works as is)")->required();
  cmd->add_option("-o,--out", opt.out_dir, "output folder for train_*.bin, val_*.bin and meta.json")->required();
  cmd->add_option("--format", opt.format, "'text', 'brown' (word/tag tokens, tags stripped) or 'auto'")
      ->check(CLI::IsMember({"auto", "text", "brown"}))->capture_default_str();
  cmd->add_option("--val-fraction", opt.val_fraction, "share of documents held out for validation")
      ->check(CLI::Range(0.0, 0.5))->capture_default_str();
  cmd->add_option("--shard-tokens", opt.shard_tokens, "tokens per output shard")->capture_default_str();
  auto* dir = cmd->add_option("--tokenizer-dir", opt.tokenizer_dir,
                              "folder with GPT-2's encoder.json and vocab.bpe (default: installed by setup)");
  cmd->add_option("--tokenizer", opt.tokenizer_file,
                  "a Hugging Face tokenizer.json (byte-level BPE: GPT-2's or Llama 3's style), or its folder")
      ->excludes(dir);
  cmd->add_option("--bos-token", opt.bos_token,
                  "the token put before every document (default: the tokenizer.json's BOS, else <|endoftext|>)");
}

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> values;  // one per config field, same order as ms::list_fields
};

void add_train(CLI::App& app, TrainArgs& args, const std::vector<ms::FieldInfo>& fields) {
  CLI::App* cmd = app.add_subcommand(
      "train", "train a GPT from a TOML config; every key can be overridden as --section.key=value");
  cmd->add_option("config", args.config_path, "TOML config file ([model], [optim], [data], [train] sections)")
      ->check(CLI::ExistingFile);
  args.values.resize(fields.size());
  for (size_t i = 0; i < fields.size(); i++) {
    const auto& f = fields[i];
    const std::string type = f.type == "choice"   ? fmt::format("{{{}}}", fmt::join(f.choices, ","))
                             : f.type == "string" ? "TEXT"
                             : f.type == "bool"   ? "BOOL"
                             : f.type == "int"    ? "INT"
                                                  : "FLOAT";
    cmd->add_option("--" + f.key, args.values[i], fmt::format("{} (default: {})", f.doc, f.value))
        ->type_name(type)
        ->group(f.key.substr(0, f.key.find('.')));
  }
}

void add_bench(CLI::App& app, ms::CommBenchOptions& opt, ms::CommBenchWorkerOptions& w) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  CLI::App* cmd = bench->add_subcommand("comm", "rendezvous time and collective bandwidth of N local ranks (gloo)");
  cmd->add_option("--ranks", opt.ranks, "rank counts, e.g. 8,16,32")->delimiter(',')->capture_default_str();
  cmd->add_option("--store", opt.stores, "stores for the start-up rows: file, redis, redis://h:p")->delimiter(',');
  cmd->add_option("--sizes", opt.sizes, "message sizes: 4K..64M (powers of 4) or a list 4K,1M")->capture_default_str();
  cmd->add_option("--iters", opt.iters, "timed iterations per op and size")->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--warmup", opt.warmup, "checked warm-up iterations")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_flag("--bandwidth-all", opt.bandwidth_all, "bandwidth rows for every rank count (default: the smallest)");
  cmd->add_flag("--mpi", opt.mpi, "also bandwidth rows on MPI (mpirun -np <smallest>)");
  cmd->add_flag("--busy", opt.busy, "also each collective right after a compute burst (<op>_busy rows)");
  cmd->add_option("--json", opt.json_path, "also write every row to this JSON file");
  CLI::App* wk = bench->add_subcommand("comm-worker", "one rank of `bench comm` (started by it)")->group("");
  wk->add_option("--sizes", w.sizes);
  wk->add_option("--iters", w.iters);
  wk->add_option("--warmup", w.warmup);
  wk->add_flag("!--no-bandwidth", w.bandwidth);
  wk->add_flag("--busy", w.busy);
  wk->add_option("--backend", w.backend);
  wk->add_option("--out", w.out);
}

struct CkptArgs {
  std::string dir, out;
};

void add_ckpt(CLI::App& app, CkptArgs& a) {
  CLI::App* ckpt = app.add_subcommand("ckpt", "checkpoint tools");
  ckpt->require_subcommand(1);
  CLI::App* inspect = ckpt->add_subcommand("inspect", "print a checkpoint's manifest and verify every file's checksum");
  inspect->add_option("dir", a.dir, "a step folder (with manifest.json) or a checkpoint folder (its latest)")->required();
  CLI::App* exp = ckpt->add_subcommand("export", "write a checkpoint's model as a Hugging Face GPT-2 folder");
  exp->add_option("dir", a.dir, "a step folder (with manifest.json) or a checkpoint folder (its latest)")->required();
  exp->add_option("out", a.out, "output folder (replaced atomically)")->required();
}

}  // namespace

int main(int argc, char** argv) {
  // The launcher's guardian (launch/janitor.h): started by this very binary, before any parsing.
  if (argc == 2 && std::string(argv[1]) == ms::kJanitorCommand) return ms::launch::janitor_main();
  CLI::App app{"megascale: GPT training after ByteDance's MegaScale"};
  app.require_subcommand(1);
  ms::PrepareOptions prep;
  TrainArgs targs;
  const ms::Config defaults;
  const auto fields = ms::list_fields(defaults);
  add_prepare(app, prep);
  add_train(app, targs, fields);
  ms::LaunchArgs launch;
  ms::add_launch_commands(app, launch);
  ms::CommBenchOptions bench;
  ms::CommBenchWorkerOptions bench_worker;
  add_bench(app, bench, bench_worker);
  CkptArgs ckpt;
  add_ckpt(app, ckpt);
  std::string diagnose_dir;
  app.add_subcommand("diagnose", "read a run's hang dumps (<out_dir>/hang/) and name the ranks the others wait for")
      ->add_option("run_dir", diagnose_dir, "the run's train.out_dir")->required();
  ms::ReportArgs report;
  ms::add_report_commands(app, report);
  ms::SelfCheckArgs selfcheck;
  ms::add_selfcheck_command(app, selfcheck);
  ms::PlanArgs plan;
  ms::add_plan_command(app, plan);
  // CLI11 2.1 reads "--key=" (an empty value, e.g. `--data.val=` to turn validation off) as "--key"
  // and takes the NEXT argument as its value; pass such arguments as "--key" "" instead. Arguments
  // after "--" (the command of `launch`) are passed on untouched.
  int end_of_options = argc;
  for (int i = 1; i < argc; i++)
    if (std::string(argv[i]) == "--") { end_of_options = i; break; }
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; i--) {
    std::string a = argv[i];
    if (i < end_of_options && a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=') {
      args.push_back("");
      a.pop_back();
    }
    args.push_back(a);
  }
  try {
    app.parse(args);  // CLI11 takes the arguments in reverse order
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (const int rc = ms::run_report_command(app, report); rc >= 0) return rc;
    if (const int rc = ms::run_selfcheck_command(app, selfcheck); rc >= 0) return rc;
    if (const int rc = ms::run_plan_command(app, plan); rc >= 0) return rc;
    if (app.got_subcommand("diagnose")) return ms::run_diagnose(diagnose_dir);
    if (const int rc = ms::run_launch_command(app, launch); rc >= 0) return rc;
    if (app.got_subcommand("bench")) {
      CLI::App* b = app.get_subcommand("bench");
      if (b->got_subcommand("comm-worker")) {
        ms::run_comm_bench_worker(bench_worker);
        return 0;
      }
      return ms::run_comm_bench(bench);
    }
    if (app.got_subcommand("ckpt")) {
      CLI::App* c = app.get_subcommand("ckpt");
      if (c->got_subcommand("inspect")) return ms::run_ckpt_inspect(ckpt.dir);
      ms::run_ckpt_export(ckpt.dir, ckpt.out);
      return 0;
    }
    if (app.got_subcommand("prepare")) {
      if (prep.tokenizer_file.empty()) prep.tokenizer_dir = ms::tokenizer_dir_or_default(prep.tokenizer_dir);
      ms::PrepareResult r = ms::run_prepare(prep);
      fmt::print("prepared {} train tokens in {} shard(s), {} val tokens in {} shard(s); unigram entropy {:.3f} bits/token\n",
                 r.train_tokens, r.train_shards.size(), r.val_tokens, r.val_shards.size(), r.unigram_entropy_bits);
      return 0;
    }
    ms::Config cfg;
    if (!targs.config_path.empty()) ms::load_toml(cfg, targs.config_path);
    CLI::App* train = app.get_subcommand("train");
    std::vector<std::pair<std::string, std::string>> overrides;
    for (size_t i = 0; i < fields.size(); i++)
      if (train->count("--" + fields[i].key) > 0) overrides.emplace_back(fields[i].key, targs.values[i]);
    ms::apply_overrides(cfg, overrides, "command line");
    // A warm standby (launch/standby.h) waits here for its rank's environment: everything above is
    // the same for every rank, everything below reads the rank's environment.
    ms::launch::await_standby_assignment();
    float loss = ms::run_training(cfg);  // validates the config before anything else
    fmt::print("final loss {:.4f}\n", loss);
    return 0;
  } catch (const std::exception& e) {  // ms::Error and anything else: one line, exit 1
    ms::logger().error("{}", e.what());
    return 1;
  }
}
