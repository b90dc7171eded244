// megascale: the one binary. Subcommands only wire library components together:
//   megascale prepare INPUT... --out DIR     text files / folders -> GPT-2 token shards
//   megascale train [CONFIG.toml] [--section.key=value ...]   train a GPT (see --help for every key)
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>   // CLI::App
#include <fmt/format.h>  // fmt::print

#include "check.h"    // ms::Error
#include "config.h"   // Config, list_fields, set_field, load_toml
#include "prepare.h"  // PrepareOptions, run_prepare
#include "trainer.h"  // run_training

namespace {

void add_prepare(CLI::App& app, ms::PrepareOptions& opt) {
  CLI::App* cmd = app.add_subcommand("prepare", "tokenize text files or folders into llm.c token shards (GPT-2 BPE)");
  cmd->add_option("inputs", opt.inputs, "text files or folders (the Brown corpus folder works as is)")->required();
  cmd->add_option("-o,--out", opt.out_dir, "output folder for train_*.bin, val_*.bin and meta.json")->required();
  cmd->add_option("--format", opt.format, "'text', 'brown' (word/tag tokens, tags stripped) or 'auto'")
      ->check(CLI::IsMember({"auto", "text", "brown"}))->capture_default_str();
  cmd->add_option("--val-fraction", opt.val_fraction, "share of documents held out for validation")
      ->check(CLI::Range(0.0, 0.5))->capture_default_str();
  cmd->add_option("--shard-tokens", opt.shard_tokens, "tokens per output shard")->capture_default_str();
  cmd->add_option("--tokenizer-dir", opt.tokenizer_dir, "folder with encoder.json and vocab.bpe (default: installed by setup)");
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
    cmd->add_option("--" + f.key, args.values[i], fmt::format("{} (default: {})", f.doc, f.value))
        ->type_name(f.type == "string" ? "TEXT" : (f.type == "bool" ? "BOOL" : (f.type == "int" ? "INT" : "FLOAT")))
        ->group(f.key.substr(0, f.key.find('.')));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"megascale: GPT training after ByteDance's MegaScale"};
  app.require_subcommand(1);
  ms::PrepareOptions prep;
  TrainArgs targs;
  const ms::Config defaults;
  const auto fields = ms::list_fields(defaults);
  add_prepare(app, prep);
  add_train(app, targs, fields);
  // CLI11 2.1 reads "--key=" (an empty value, e.g. `--data.val=` to turn validation off) as "--key"
  // and takes the NEXT argument as its value; pass such arguments as "--key" "" instead.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; i--) {
    std::string a = argv[i];
    if (a.size() > 3 && a.rfind("--", 0) == 0 && a.back() == '=') {
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
    if (app.got_subcommand("prepare")) {
      ms::PrepareResult r = ms::run_prepare(prep);
      fmt::print("prepared {} train tokens in {} shard(s), {} val tokens in {} shard(s); unigram entropy {:.3f} bits/token\n",
                 r.train_tokens, r.train_shards.size(), r.val_tokens, r.val_shards.size(), r.unigram_entropy_bits);
      return 0;
    }
    ms::Config cfg;
    if (!targs.config_path.empty()) ms::load_toml(cfg, targs.config_path);
    CLI::App* train = app.get_subcommand("train");
    for (size_t i = 0; i < fields.size(); i++)
      if (train->count("--" + fields[i].key) > 0) ms::set_field(cfg, fields[i].key, targs.values[i], "command line");
    cfg.validate();
    float loss = ms::run_training(cfg);
    fmt::print("final loss {:.4f}\n", loss);
    return 0;
  } catch (const ms::Error& e) {
    fmt::print(stderr, "megascale: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "megascale: error: {}\n", e.what());
    return 1;
  }
}
