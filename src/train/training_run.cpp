// training_run.cpp: see training_run.h (the stop signals, start_world, open_data).
#include "train/training_run.h"

#include <omp.h>      // omp_set_num_threads, omp_get_num_procs
#include <pthread.h>  // pthread_sigmask
#include <signal.h>   // sigwait, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGXFSZ

#include <algorithm>  // std::max, std::min
#include <atomic>
#include <chrono>
#include <cstdio>     // std::fprintf
#include <cstdlib>    // std::_Exit, std::getenv
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "base/aligned.h"         // set_huge_buffer_pages
#include "base/atomic_file.h"     // write_text_atomic
#include "base/check.h"           // MS_CHECK
#include "base/device.h"          // require_device
#include "ckpt/ckpt_fault.h"      // check_ckpt_fault_env
#include "comm/placement.h"       // gather_rank_hosts, placement_report
#include "comm/world.h"           // init_world
#include "data/prepare.h"         // read_prepared_tokenizer
#include "model/hf_import.h"      // hf_model_config (train.init_from)
#include "obs/run_recorder.h"     // flush_active_recorder
#include "train/launch_report.h"  // write_launch_report

namespace ms {

namespace {
std::atomic<int> g_stop_signal{0};
}  // namespace

void install_stop_handlers() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // inherited by every thread created from here on
  std::thread([set] {
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      HangWatch::on_signal(sig);  // hang localization: a dump of where this rank is (hang_watch.h)
      // SIGUSR1: the driver's recovery stop (launch/driver.h): the dump above, then out at once,
      // without a save (the state may be what failed). The records written so far stay.
      if (sig == SIGUSR1) {
        MachineBatchFeed::unlink_attaching();  // _Exit skips the feed's cleanup (its attach window)
        flush_active_recorder();
        std::fprintf(stderr, "megascale: stopped by the driver (SIGUSR1) for a recovery\n");
        std::_Exit(128 + SIGUSR1);
      }
      g_stop_signal.store(sig);
    }
  }).detach();
  // A file-size limit (RLIMIT_FSIZE) makes a checkpoint write fail with EFBIG, reported as a
  // failed save, instead of killing the process.
  signal(SIGXFSZ, SIG_IGN);
}

int stop_signal() { return g_stop_signal.load(); }

uint64_t TrainingRun::tokens_per_step() const {
  return static_cast<uint64_t>(cfg.train.batch_size) * cfg.train.seq_len * cfg.train.grad_accum * dp;
}

std::string StartupPhases::describe() const {
  std::vector<std::string> parts;
  for (const auto& [name, s] : phases) parts.push_back(fmt::format("{} {:.2f}", name, s));
  return fmt::format("{:.2f} s: {}", since_start.seconds(), fmt::join(parts, ", "));
}

nlohmann::json StartupPhases::to_json() const {
  nlohmann::json j = {{"total", since_start.seconds()}};
  for (const auto& [name, s] : phases) j[name] = s;
  return j;
}

void start_world(TrainingRun& run, const Config& cfg_in) {
  namespace fs = std::filesystem;
  // The world first: layout errors (world size vs grid, global batch vs dp) before any work.
  run.cfg = cfg_in;
  Config& cfg = run.cfg;
  // A malformed ckpt: entry of MEGASCALE_FAULT (or the retired MEGASCALE_CKPT_FAULT) fails here,
  // not later on the copier thread.
  check_ckpt_fault_env();
  run.env = CommEnv::from_environment();
  CommEnv& env = run.env;
  // train.init_from: the folder's config.json decides the model's architecture (named errors first).
  if (!cfg.train.init_from.empty()) cfg.model = hf_model_config(cfg.train.init_from, cfg.model);
  cfg.resolve_layout(env.world_size);  // validates every value first, before any arithmetic on them
  // train.device = cuda: the build option, a device that opens (names the failing call), before anything starts.
  require_device(cfg.train.device);
  // One GPU per local rank (several ranks share one when there are fewer), before any CUDA work.
  if (cfg.train.device == Device::kCuda) select_cuda_device(env.local_rank);
  if (cfg.parallel.backend != BackendChoice::kAuto && env.world_size > 1) env.backend = config_name(cfg.parallel.backend);
  // auto on GPUs: NCCL where it is built (one process per GPU) and no pipeline needs its send/recv
  // (config_validate.cpp); else the environment's gloo / mpi, staging through host memory.
  if (cfg.parallel.backend == BackendChoice::kAuto && env.world_size > 1 && cfg.train.device == Device::kCuda &&
      cfg.parallel.pp <= 1 && backend_built("nccl"))
    env.backend = "nccl";
  env.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.parallel.timeout_s * 1000.0));
  // obs.watchdog: before the world, so its creation is watched too.
  run.hang_watch = std::make_unique<HangWatch>(cfg, env);
  const char* stage_env = std::getenv("MEGASCALE_TEST_STAGE_HOST");
  const bool stage_host = stage_env && std::string(stage_env) == "1" && env.world_size > 1;
  // In-memory checkpoints: on where this host has a memory folder (the driver's executors give one)
  // and the state is in host memory; memory_every = N > 0 on a GPU is a named error (its saver's).
  const bool memory_possible = cfg.train.device == Device::kCpu || cfg.checkpoint.memory_every > 0;
  if (cfg.checkpoint.memory_every != 0 && memory_possible) run.memory_dir = memory_dir_of(cfg);
  if (env.world_size > 1) {
    std::unique_ptr<Communicator> world = init_world(env);
    // Tests: host buffers through the GPU staging path (comm/staging.h), on every group.
    if (stage_host) world->stage_host_buffers(true);
    run.grid = std::make_unique<RankGrid>(std::move(world), cfg.parallel.order,
                                          GridShape{cfg.parallel.tp, cfg.parallel.dp, cfg.parallel.pp},
                                          /*memory_group=*/!run.memory_dir.empty());
  }
  if (run.grid) run.hang_watch->attach(*run.grid, env, cfg);
  run.rank = run.grid ? run.grid->world().rank() : 0;
  run.startup.mark("world");
  // One job per run folder: rank 0 locks train.out_dir and the checkpoint folder for the run's
  // lifetime; a second job stops here, on every rank, before it writes anything (ckpt/dir_lock.h).
  run.dir_locks = lock_run_dirs(cfg, run.world(), run.rank);
  run.dp = cfg.parallel.dp;
  run.dp_rank = run.grid ? run.grid->coord().dp : 0;
  run.stage = run.grid ? run.grid->coord().pp : 0;
  run.observer = std::make_unique<RunObserver>(cfg, run.grid.get());  // records, aligned clocks (a collective)
  run.threads = cfg.train.threads > 0 ? cfg.train.threads
                                      : std::max(1, omp_get_num_procs() / std::max(1, env.local_world_size));
  omp_set_num_threads(run.threads);
  set_huge_buffer_pages(cfg.train.huge_pages);  // before the model's buffers exist
  if (run.rank == 0) {
    fs::create_directories(run.out_dir());
    write_text_atomic(run.out_dir() + "/config.resolved.toml", to_toml(cfg));
  }
  write_launch_report(cfg, run.rank, env.world_size);  // run.json for `megascale launch`'s dashboard
  run.log = std::make_unique<RunLog>(run.out_dir(), cfg.train.progress, /*silent=*/run.rank != 0);
  if (stage_host) run.log->message("comm", "MEGASCALE_TEST_STAGE_HOST=1: every group stages its buffers (comm/staging.h)");
  // Which host each (tp, dp, pp) rank runs on, when the job spans hosts (a collective).
  if (run.grid) {
    const PlacementReport where =
        placement_report(run.grid->layout(), gather_rank_hosts(run.grid->world(), this_rank_host(env)));
    for (const std::string& line : where.lines) run.log->message("placement", "placement: " + line);
    for (const std::string& w : where.warnings) run.log->message("placement", "warning: " + w);
  }
  run.startup.mark("setup");
}

std::string data_meta_path(const std::string& train) {
  namespace fs = std::filesystem;
  const fs::path p(train);
  return ((fs::is_directory(p) ? p : p.parent_path()) / "meta.json").string();
}

void open_data(TrainingRun& run) {
  namespace fs = std::filesystem;
  const Config& cfg = run.cfg;
  const CommEnv& env = run.env;
  // The tokenizer the shards were prepared with must fit the model's vocabulary (an imported model
  // trains on text in its own vocabulary: prepare --tokenizer).
  if (const auto tok = read_prepared_tokenizer(data_meta_path(cfg.data.train)))
    MS_CHECK(tok->vocab_size <= cfg.model.vocab_size, "{}: the data was prepared with a tokenizer of {} ids ({}), "
             "more than model.vocab_size={}: prepare it with the model's tokenizer (prepare --tokenizer "
             "FOLDER/tokenizer.json) or set model.vocab_size", data_meta_path(cfg.data.train), tok->vocab_size,
             tok->location, cfg.model.vocab_size);
  const int B = cfg.train.batch_size, T = cfg.train.seq_len;
  // One loader per machine (local rank 0 validates the shards and prepares every micro-batch into
  // shared memory); the ranks that use tokens (pipeline stages with the first or the last chunk)
  // read their data-parallel slice from it.
  MachineFeedOptions& feed_opt = run.feed_opt;
  feed_opt.paths = {cfg.data.train};
  feed_opt.B = B, feed_opt.T = T, feed_opt.vocab_size = cfg.model.vocab_size;
  feed_opt.seed = static_cast<uint64_t>(cfg.train.seed), feed_opt.shuffle = cfg.data.shuffle;
  feed_opt.name = "data.train";
  feed_opt.dp = run.dp, feed_opt.dp_rank = run.dp_rank;
  feed_opt.needs_tokens = run.stage == 0 || run.stage == cfg.parallel.pp - 1;
  feed_opt.local_rank = env.local_rank, feed_opt.local_world_size = env.local_world_size;
  // Several emulated hosts on one machine each have their own loader: the driver's executors say
  // their host (host_index); under mpirun or srun the network namespace tells them apart (one per
  // emulated host, scripts/emulated_cluster.sh; on a real machine every rank shares it).
  std::error_code no_ns;
  const std::string netns = fs::read_symlink("/proc/self/ns/net", no_ns).string();
  feed_opt.job_key = env.run_id + "|" + env.store + "|" + fs::absolute(run.out_dir()).string() + "|" +
                     (env.host_index >= 0 ? std::to_string(env.host_index) : "") + "|" + netns;
  feed_opt.timeout_s = cfg.data.loader_timeout_s;
  // Validation: opened (and validated) only by the ranks that use tokens; the pipeline's middle
  // stages learn the number of evaluation batches from stage 0.
  if (run.validating() && feed_opt.needs_tokens)
    run.val = std::make_unique<DataLoader>(std::vector<std::string>{cfg.data.val}, B, T, cfg.model.vocab_size,
                                           static_cast<uint64_t>(cfg.train.seed), false, "data.val");
  const uint64_t val_samples = run.val ? run.val->num_samples() : 0;
  run.eval_batches =
      run.val ? static_cast<int>(std::max<uint64_t>(1, std::min<uint64_t>(cfg.train.eval_batches, val_samples / B)))
              : 0;
  if (run.validating() && cfg.parallel.pp > 1) {
    float n = static_cast<float>(run.eval_batches);  // exact: at most train.eval_batches
    run.grid->pp().broadcast(&n, 1, DType::kF32, 0);
    run.eval_batches = static_cast<int>(n);
  }
  run.startup.mark("data");
}

}  // namespace ms
