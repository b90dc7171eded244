// selfcheck_plan: which self-checks the driver runs on which hosts after a fault, and how it judges
// them (launch-internal; docs/reliability.md "Self-checks"). MegaScale's order, on our hardware:
//  1. every host on its own: a GEMM check on one process (right result; speed compared with the
//     other hosts) and an all-reduce among the host's `nproc` processes (right sum, bandwidth);
//  2. neighbours: an all-reduce between each host and the next one in the list (a ring), run in
//     rounds of disjoint pairs so that no host is in two groups at once.
// Judgment: a host fails when its GEMM result is wrong, its GEMM speed or its own all-reduce
// bandwidth is below (1 - margin) x the hosts' lower median (of 2 hosts the slower one: two cannot
// tell which is slow, so neither fails on speed; a host of one process measures no bandwidth), its
// own all-reduce failed, or every pair it was in failed while each partner passed its own checks
// (so one bad host does not take its good neighbours down with it).
// Pure logic: unit-tested without processes.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launch/heartbeat.h"  // SelfCheckResult

namespace ms::launch {

// What every self-check process shares: the command that runs one self-check process (the
// application's, e.g. {"/path/megascale", "selfcheck"}; the plan appends --collective, --timeout,
// --gemm), the collective backend, the round's time limit (each process's own rendezvous /
// collective limit is half of it, at least 5 s).
struct SelfCheckSetup {
  std::vector<std::string> command;
  std::string backend = "gloo";
  double timeout_s = 60;
};
// One host's command in a self-check group of `world` processes that rendezvous as one run
// (store_env: the store's variables of that run, store.env(run_id)): its `count` processes are the
// group's ranks first..first+count-1 (RANK = LOCAL_RANK, one OpenMP thread each, backend "self" for
// a group of one); rank 0 also runs the GEMM check when `gemm` (a host round); without it (a pair
// round) the timed all-reduces are 2 of 1 MiB: the link's correctness, not its bandwidth.
SelfCheckCommand selfcheck_command(const SelfCheckSetup& s, int id, const std::map<std::string, std::string>& store_env,
                                   int first, int count, int world, bool gemm);

// Ring neighbours of `hosts` (in the given order) as rounds of disjoint pairs: 2 hosts -> one pair,
// 3 -> three rounds of one pair, 4 -> {(0,1),(2,3)} then {(1,2),(3,0)}, ...; fewer than 2 -> none.
std::vector<std::vector<std::pair<int, int>>> neighbour_rounds(const std::vector<int>& hosts);

struct HostCheck {
  int host = -1;
  bool ran = false;          // the host's own round reported (false: its processes never reported)
  bool not_run = false;      // a check could not run (no rendezvous, a process without a result):
                             // neither passed nor wrong (`megascale selfcheck` writes "not run: <why>")
  bool gemm_ok = false;
  double gemm_gflops = 0;
  bool allreduce_ok = false;
  double allreduce_gbps = 0;  // the host's own all-reduce bandwidth (its slowest rank's view); 0: not measured
  std::string detail;        // the checks' own words for a failure ("all-reduce of 1 MiB: expected 6, got 7")
  std::vector<std::pair<int, bool>> pairs;  // (partner host, passed)
};

struct HostVerdict {
  int host = -1;
  bool ok = true;
  std::string why;  // for a failure: what failed, in words
  // How it failed: "no report", "not run", "wrong" (a wrong GEMM or all-reduce result), "slow",
  // "pair" (every pair it was in failed); "" when ok. recovery_policy.h compares hosts by it.
  std::string kind;
};

std::vector<HostVerdict> judge_selfchecks(const std::vector<HostCheck>& checks, double gemm_margin);

// The host's own round: its processes' results (`megascale selfcheck` JSON, train/selfcheck.h) into
// c (ran, GEMM ok and speed from the process that ran it, all-reduce ok from all, the first failure's
// words). A process without a result, or a check it reports "not run", sets not_run (a failed check
// that is not a wrong result).
void add_host_results(HostCheck& c, const std::vector<SelfCheckResult>& results);
// A neighbour-pair process's all-reduce passed (a JSON true; a check not run reports null).
bool result_passed_allreduce(const SelfCheckResult& r);

}  // namespace ms::launch
