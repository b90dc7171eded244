// run_finish.cpp: see run_finish.h.
#include "train/run_finish.h"


#include <fmt/format.h>  // fmt::format
#include <nlohmann/json.hpp>  // the export's config.json

#include "base/check.h"         // MS_CHECK
#include "ckpt/ckpt_comm.h"     // any_rank
#include "data/prepare.h"       // read_prepared_tokenizer, load_prepared_tokenizer
#include "data/tokenizer.h"     // Tokenizer, Gpt2Tokenizer
#include "train/training_run.h" // data_meta_path
#include "model/hf_export.h"    // export_hf
#include "train/evaluation.h"   // eval_loss
#include "train/run_loop.h"     // report_saves
#include "train/sampling.h"     // sample_text

namespace ms {

namespace {
// Each stage's mean idle fraction (1 - compute / step time) and pipeline waits, gathered over the
// pipeline group, against the closed form of the schedule's bubble, (p - 1) / (v m).
void log_pipeline_summary(TrainingRun& run, const LoopEnd& end) {
  const Config& cfg = run.cfg;
  const int P = cfg.parallel.pp, n = cfg.train.steps - 1;
  const float mine[2] = {static_cast<float>(end.idle_sum / n), static_cast<float>(end.pp_wait_sum / n)};
  std::vector<float> all(2 * P);
  run.grid->pp().all_gather(mine, all.data(), 2, DType::kF32);
  std::string per;
  for (int s = 0; s < P; s++)
    per += fmt::format("{}stage {}: {:.1f}% idle, {:.1f} ms waited", s ? "; " : "", s, all[2 * s] * 100, all[2 * s + 1]);
  const int v = run.trainer->parallel().num_chunks(), m = cfg.train.grad_accum;
  run.log->message("pipeline", fmt::format("mean over steps 2..{}: {} (closed-form bubble (p-1)/(v m) = {:.1f}%)",
                                           cfg.train.steps, per, 100.0 * (P - 1) / (v * m)));
}

// The sample: rank 0 alone on a whole model (its own, or the pipeline's gathered into one), or with
// the other parts of its TP group when only tensor parallelism splits the model.
void log_sample(TrainingRun& run, const std::vector<float>& whole, const std::string& tokenizer_dir) {
  const Config& cfg = run.cfg;
  const int T = cfg.train.seq_len;
  const bool tp_collective = cfg.parallel.tp > 1 && cfg.parallel.pp == 1;
  const bool first_replica = !run.grid || run.grid->coord().dp == 0;
  // The tokenizer the data was prepared with (its meta.json), else GPT-2's tables.
  const std::optional<PreparedTokenizer> prepared = read_prepared_tokenizer(data_meta_path(cfg.data.train));
  std::unique_ptr<Tokenizer> owned = prepared ? load_prepared_tokenizer(*prepared, tokenizer_dir)
                                              : std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::load_dir(tokenizer_dir));
  const Tokenizer& tok = *owned;
  // A model whose vocabulary lacks the separator (every sample's prompt) cannot be sampled: said, not failed.
  if (tok.document_separator() >= cfg.model.vocab_size) {
    if (run.rank == 0)
      run.log->message("sample", fmt::format("sample skipped: the model's vocabulary ({} ids) does not hold the "
                                              "document separator ({}), the prompt of every sample",
                                              cfg.model.vocab_size, tok.document_separator()));
    return;
  }
  const uint64_t seed = static_cast<uint64_t>(cfg.train.seed);
  GPT& model = run.trainer->model();
  std::string text;
  if (tp_collective && first_replica && run.grid->coord().pp == 0) {
    text = sample_text(model, tok, T, cfg.train.sample_tokens, seed, &run.grid->tp());
  } else if (!tp_collective && run.rank == 0) {
    if (cfg.parallel.pp > 1) {
      GPT one(cfg.model, 1, T, cfg.train.precision);
      one.load_params(whole.data());
      text = sample_text(one, tok, T, cfg.train.sample_tokens, seed, nullptr);
    } else {
      text = sample_text(model, tok, T, cfg.train.sample_tokens, seed, nullptr);
    }
  }
  if (run.rank == 0) run.log->message("sample", "sample:\n---\n" + text + "\n---");
}
}  // namespace

float finish_run(TrainingRun& run, const LoopEnd& end, const std::string& tokenizer_dir) {
  const Config& cfg = run.cfg;
  RunLog& log = *run.log;
  float last = end.last;
  if (run.first_step > cfg.train.steps) {  // resumed from a checkpoint of the last step: nothing left to train
    log.message("resume", fmt::format("the checkpoint is at train.steps={}: nothing left to train", cfg.train.steps));
    last = static_cast<float>(run.restored.manifest.loss);
    if (run.validating()) {
      last = eval_loss(*run.trainer, run.val.get(), run.eval_batches);
      log.eval(cfg.train.steps, last);
    }
  }
  run.ckpt->drain();
  MS_CHECK(!any_rank(run.world(), report_saves(run) && cfg.checkpoint.on_failure == SaveFailurePolicy::kStop),
           "the final checkpoint save failed and checkpoint.on_failure=stop");
  ParallelModel& pm = run.trainer->parallel();
  pm.sync_params();
  log.message("data", fmt::format("this machine's loader read {} samples from the token files ({} per step for "
                                  "the whole data-parallel group, plus up to 4 micro-batches read ahead)",
                                  run.train->samples_read(),
                                  static_cast<uint64_t>(cfg.train.batch_size) * cfg.train.grad_accum * run.dp));
  if (cfg.parallel.pp > 1 && cfg.train.steps > 1) log_pipeline_summary(run, end);
  // The export: rank 0's own parameters when the model is whole, else the whole model assembled
  // over the first data-parallel replica's TP and PP groups (only they take part).
  const bool split = cfg.parallel.tp > 1 || cfg.parallel.pp > 1;
  const bool first_replica = !run.grid || run.grid->coord().dp == 0;
  const std::string model_dir = run.out_dir() + "/model";
  std::vector<float> whole;
  if (split && first_replica) whole = pm.gather_whole_model();
  if (run.rank == 0) {
    if (split) export_hf(cfg.model, whole.data(), model_dir);
    else export_hf(run.trainer->model(), model_dir);
    log.message("export", fmt::format("saved {} (Hugging Face {} safetensors + config.json)", model_dir,
                                      hf_config_json(cfg.model)["architectures"][0].get<std::string>()));
  }
  if (cfg.train.sample_tokens > 0) log_sample(run, whole, tokenizer_dir);
  return last;
}

}  // namespace ms
