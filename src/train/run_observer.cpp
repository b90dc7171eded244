// run_observer.cpp: see run_observer.h.
#include "train/run_observer.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "comm/clock_sync.h"       // measure_clock_offset
#include "obs/aligned_clock.h"     // set_clock_offset, aligned_now_ns
#include "obs/fault_injection.h"   // init_faults, fault_at_step_start
#include "obs/rank_identity.h"     // set_rank_identity, describe_rank
#include "obs/trace_sink.h"        // TraceSink

namespace ms {

RunObserver::RunObserver(const Config& cfg, RankGrid* grid) : cfg_(cfg), grid_(grid) {
  RankIdentity id;
  std::vector<int> stages(1, 0);                           // per world rank: its pipeline stage
  std::vector<std::string> labels(1, describe_rank(0, 0, 0, 0));  // "rank 5 (pp=1 dp=0 tp=1)"
  if (grid) {
    const RankLayout& L = grid->layout();
    id.rank = grid->world().rank(), id.world = grid->world().size();
    const GridCoord c = grid->coord();
    id.tp = c.tp, id.dp = c.dp, id.pp = c.pp;
    id.tp_size = L.shape().tp, id.dp_size = L.shape().dp, id.pp_size = L.shape().pp;
    id.order = L.order_string();
    id.backend = grid->world().backend();
    id.groups[grid->world().name()] = grid->world().world_ranks();
    for (ParallelDim d : {ParallelDim::kTp, ParallelDim::kDp, ParallelDim::kPp})
      id.groups[grid->group(d).name()] = grid->group(d).world_ranks();
    if (grid->embedding()) id.groups[grid->embedding()->name()] = grid->embedding()->world_ranks();
    stages.clear(), labels.clear();
    for (int w = 0; w < id.world; w++) {
      const GridCoord k = L.coord(w);
      stages.push_back(k.pp);
      labels.push_back(describe_rank(w, k.tp, k.dp, k.pp));
    }
    set_clock_offset(measure_clock_offset(grid->world()));
  }
  rank_ = id.rank;
  set_rank_identity(id);
  init_faults(rank_);
  TraceSink::get().set_enabled(TraceTrack::kCompute, cfg.obs.records);
  if (cfg.obs.records)
    recorder_ = std::make_unique<RunRecorder>(fmt::format("{}/records/rank-{:05d}.jsonl", cfg.train.out_dir, rank_),
                                              cfg.obs.flush_ms);
  report_ = std::make_unique<SegmentReport>(cfg.obs, grid ? &grid->world() : nullptr, std::move(stages),
                                            std::move(labels));
}

RunObserver::~RunObserver() = default;

void RunObserver::begin_step(int step) {
  TraceSink::get().set_step(step);
  fault_at_step_start(step);
  step_t0_ = aligned_now_ns();
}

void RunObserver::end_step(const StepRecord& r, RunLog& log) {
  const int64_t t1 = aligned_now_ns();
  const auto& seg = report_->end_step(r.step, r.step_seconds * 1e3);
  if (recorder_) {
    nlohmann::json ms = nlohmann::json::object(), cpu = nlohmann::json::object();
    for (const SegmentReport::SegmentMs& m : seg) {
      ms[std::string(m.seg)] = std::round(m.ms * 1000) / 1000;
      if (m.cpu_ms > 0) cpu[std::string(m.seg)] = std::round(m.cpu_ms * 1000) / 1000;
    }
    nlohmann::json j = {{"step", r.step}, {"t0", step_t0_}, {"t1", t1}, {"lr", r.lr}, {"tokens_per_s", r.tokens_per_s},
                        {"mfu", r.mfu}, {"mfu_gemm", r.mfu_gemm}, {"grad_norm", r.grad_norm}, {"ms", ms},
                        {"cpu_ms", cpu}};
    // mfu, mfu_gemm: NaN, written as null, on every rank but 0 (only rank 0 measures the peaks).
    j["loss"] = std::isfinite(r.loss) ? nlohmann::json(r.loss) : nlohmann::json(nullptr);
    recorder_->step(std::move(j));
  }
  for (const auto& [event, text] : report_->summarize(r.step)) {
    log.message(event, text);
    if (recorder_ && event != "segments") recorder_->event(event, text);
  }
}

void RunObserver::after_step(int step) {
  if (!grid_ || cfg_.obs.realign_every <= 0 || step % cfg_.obs.realign_every != 0) return;
  const ClockOffset o = measure_clock_offset(grid_->world());
  set_clock_offset(o);
  if (recorder_) recorder_->clock(step + 1, o);
}

}  // namespace ms
