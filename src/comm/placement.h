// placement: which host each rank of the grid runs on, as MegaScale lays a job out: tensor
// parallelism inside a host (its collectives sit on every layer's critical path), data and pipeline
// parallelism across hosts. gather_rank_hosts asks every rank for its host (a collective over the
// world); placement_report turns the answer into the run log's lines: per host, its ranks with their
// (tp, dp, pp) coordinates, and a warning for every TP group that spans hosts.
// A rank's host is its transport's address (CommEnv::hostname: MEGASCALE_HOST from the driver, or
// found on the interface under srun; emulated hosts share a machine and its hostname), else, when
// that is loopback, the machine's hostname.
// Guarantees: gather_rank_hosts returns the same list on every rank (rank order); placement_report
// is pure, and says nothing (no lines) when every rank is on one host.
#pragma once
#include <string>
#include <vector>

#include "comm/rank_grid.h"  // RankLayout

namespace ms {

class Communicator;
struct CommEnv;

// This process's host: env.hostname unless it is 127.0.0.1, else gethostname().
std::string this_rank_host(const CommEnv& env);

// Every world rank's host, indexed by world rank (names longer than 63 bytes are cut).
std::vector<std::string> gather_rank_hosts(Communicator& world, const std::string& mine);

struct PlacementReport {
  std::vector<std::string> lines;     // "host 10.77.0.1: ranks 0 (tp=0,dp=0,pp=0), 1 (...)"
  std::vector<std::string> warnings;  // one per TP group across hosts
};
PlacementReport placement_report(const RankLayout& layout, const std::vector<std::string>& hosts);

}  // namespace ms
