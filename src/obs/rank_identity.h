// rank_identity: who this process is in the job, for everything that writes records or dumps
// (obs/run_recorder.h, the hang watchdog): world rank and size, (tp, dp, pp) coordinates, the grid's
// order string, host, pid, backend, and every communication group it belongs to with its members'
// world ranks. Set once by the training run after the rank grid exists; a process that never sets
// it is rank 0 of 1. Thread-safe.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ms {

struct RankIdentity {
  int rank = 0, world = 1;
  int tp = 0, dp = 0, pp = 0;           // coordinates
  int tp_size = 1, dp_size = 1, pp_size = 1;
  std::string order = "tp-dp-pp";
  std::string host;                     // gethostname
  int pid = 0;
  std::string backend = "self";
  std::map<std::string, std::vector<int>> groups;  // group name -> world ranks in group-rank order
};

void set_rank_identity(RankIdentity id);
RankIdentity rank_identity();
// The fields of docs/observability.md's header record: rank, world, coord, shape, order, host, pid,
// backend, groups.
nlohmann::json identity_json(const RankIdentity& id);
// "rank 5 (pp=1 dp=0 tp=1)": how messages, reports and pages name a rank.
std::string describe_rank(int rank, int tp, int dp, int pp);

}  // namespace ms
