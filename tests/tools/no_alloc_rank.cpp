// no_alloc_rank: one rank of test_no_alloc's dp = 2 check, started by `megascale launch --nproc 2`
// (RANK/WORLD_SIZE/MEGASCALE_STORE in the environment). Every rank builds the Trainer over the
// world as its data-parallel group (ZeRO-2), takes 2 warm-up steps, then counts its own heap
// allocations over 3 steps with the interposer of tests/common/alloc_interposer.h and prints
//   NOALLOC rank=R project=N comm=K library=M unowned=U zero=Z
// (K: the part of N whose owner is in src/comm/; Z = 1 when ZeRO-2 ran), followed by who allocated. Exit code 0 when it ran (the test judges the
// counts), 2 on an error.
#include <omp.h>

#include <cstdio>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "common/alloc_interposer.h"
#include "common/tiny_training.h"
#include "comm/comm_env.h"
#include "comm/world.h"
#include "base/clock.h"
#include "obs/trace_sink.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  using namespace ms;
  CLI::App app{"no_alloc_rank: one rank of the dp = 2 no-allocation check"};
  std::string precision = "fp32", optimizer = "adamw";
  int threads = 1;
  app.add_option("--precision", precision);
  app.add_option("--optimizer", optimizer);
  app.add_option("--threads", threads);
  CLI11_PARSE(app, argc, argv);
  try {
    alloc_check::init();
    if (!alloc_check::ready()) {
      std::fprintf(stderr, "no_alloc_rank: no symbol table in /proc/self/exe\n");
      return 2;
    }
    omp_set_num_threads(threads);
    CommEnv env = CommEnv::from_environment();
    env.timeout = std::chrono::milliseconds(60000);
    auto world = init_world(env);
    Config cfg = ms::testing::tiny_training_config(precision, optimizer, threads);
    cfg.parallel.bucket_mb = 0.05f;  // several buckets: overlap in backward, staged all-gathers
    cfg.validate();
    Trainer tr(cfg, world.get());
    // Each rank its own data; built before counting.
    std::function<void(int*, int*)> fn = ms::testing::lcg_batches(cfg, 1 + static_cast<uint64_t>(world->rank()));
    for (int s = 0; s < 2; s++) tr.train_step(fn);
    tr.parallel().sync_params();  // the warm-up's last all-gathers are done before counting starts
    world->barrier();
    const int64_t window_start = ms::steady_ns();
    alloc_check::start();
    StepStats st;
    for (int s = 0; s < 3; s++) st = tr.train_step(fn);
    tr.parallel().sync_params();  // ... and the window's last all-gathers before it stops
    const alloc_check::Counts c = alloc_check::stop();
    const std::string who = alloc_check::report();
    const long comm = alloc_check::project_at("/src/comm/");
    // Communication ops started in the window (the trace sink's comm track; read after counting).
    long ops = 0;
    for (const ms::TraceRecord& r : ms::TraceSink::get().snapshot(ms::TraceTrack::kComm))
      if (r.enqueue_ns >= window_start) ops++;
    std::printf("NOALLOC rank=%d project=%ld comm=%ld library=%ld unowned=%ld zero=%d ops=%ld loss=%.4f\n%s",
                world->rank(), c.project, comm, c.library, c.unowned, tr.parallel().data_parallel_size() > 1 ? 1 : 0, ops, st.loss,
                who.c_str());
    std::fflush(stdout);
    world->barrier();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "no_alloc_rank: %s\n", e.what());
    return 2;
  }
}
