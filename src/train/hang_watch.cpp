// hang_watch.cpp: see hang_watch.h.
#include "train/hang_watch.h"

#include <chrono>

#include "comm/comm_fatal.h"    // set_comm_failure_handler, end_process_now
#include "base/log.h"           // logger
#include "comm/rank_grid.h"     // RankGrid
#include "obs/run_recorder.h"   // flush_active_recorder
#include "obs/rank_identity.h"  // rank_identity, set_rank_identity
#include "obs/watchdog.h"       // Watchdog

namespace ms {
namespace {

void fatal_comm_failure(const std::string& what) { Watchdog::get()->fatal(HangDumpKind::kCommError, what); }

void end_now(int code) { end_process_now(code); }

}  // namespace

HangWatch::HangWatch(const Config& cfg, const CommEnv& env) {
  if (!cfg.obs.watchdog || Watchdog::get()) return;
  WatchdogOptions o;
  o.out_dir = cfg.train.out_dir;
  o.rank = env.rank, o.world = env.world_size;
  o.grace = std::chrono::milliseconds(static_cast<int64_t>(cfg.obs.watchdog_grace_s * 1000.0));
  o.end_process = &end_now;
  Watchdog::start(o);
  set_comm_failure_handler(&fatal_comm_failure);
  on_ = true;
}

HangWatch::~HangWatch() {
  if (on_) Watchdog::get()->finish_clean();
}

void HangWatch::attach(RankGrid& grid, const CommEnv& env, const Config& cfg) {
  if (rank_identity().world == env.world_size) return;  // set by the run recorder
  RankIdentity id;
  id.rank = grid.world().rank(), id.world = grid.world().size();
  const GridCoord c = grid.coord();
  id.tp = c.tp, id.dp = c.dp, id.pp = c.pp;
  id.tp_size = cfg.parallel.tp, id.dp_size = cfg.parallel.dp, id.pp_size = cfg.parallel.pp;
  id.order = grid.layout().order_string();
  id.backend = grid.world().backend();
  for (Communicator* g : {&grid.world(), &grid.tp(), &grid.dp(), &grid.pp(), grid.embedding()})
    if (g) id.groups[g->name()] = g->world_ranks();
  set_rank_identity(std::move(id));
}

void HangWatch::comm_failure(const std::string& what) {
  if (on_) fatal_comm_failure(what);
}

void HangWatch::error_after_start(const std::string& what, int world_size) {
  if (world_size <= 1) return;
  logger().error("{}", what);
  logger().flush();
  flush_active_recorder();
  end_process_now(1);
}

void HangWatch::on_signal(int sig) {
  if (Watchdog* w = Watchdog::get()) w->on_signal(sig);
}

}  // namespace ms
