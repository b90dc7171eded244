// diagnose: `megascale diagnose RUN_DIR`, the hang report. Reads every rank's hang dump
// (<run_dir>/hang/rank-RRRRR.json, obs/hang_dump.h) and, when present, the headers of the record files
// (<run_dir>/records/rank-RRRRR.jsonl) for the world size, grid and groups, and names:
//  - the collectives (and sends / receives) the dumped ranks wait in: group, op, seq, the waiters;
//  - the culprits: members of such a group that left no dump, that never entered that (group, seq)
//    (their ring's last op on the group is older), or that entered it only after the waiters'
//    deadline; ranks that are themselves waiting elsewhere are followed (a wait-for graph), so only the
//    ranks at the end of the chains are named; plus ranks whose dump shows their process was frozen
//    (stopped) while the others waited. Each with its world rank and (dp, tp, pp) coordinates.
// Guarantees: reading never changes the run folder; a malformed dump is an ms::Error naming the file
// and field; times of different ranks are compared on the aligned clock (each dump's clock offset).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ms {

struct DiagnoseCoord {
  int tp = -1, dp = -1, pp = -1;  // -1: unknown
};

// One place ranks wait in: a collective (group, op, seq) or one rank's send / recv (peer set).
struct WaitSite {
  std::string group, op;
  uint64_t seq = 0;
  int peer = -1;                // send/recv: the other end's world rank; -1 for a collective
  std::vector<int> members;     // world ranks of the group (collective) or the two ends (send/recv)
  std::vector<int> waiters;     // ranks waiting in it (their dumps show it running or failed)
  std::vector<int> missing;     // members that were not in it (no dump, never entered, entered late)
};

struct Culprit {
  int rank = -1;
  DiagnoseCoord coord;
  std::string why;  // "left no dump", "never entered all_reduce on 'dp[tp=0,pp=1]' seq 41 (...)", ...
};

struct Diagnosis {
  int world = 0;
  std::vector<int> dumped;    // ranks with a dump
  std::vector<int> no_dump;   // ranks of the world without one
  std::vector<DiagnoseCoord> coords;  // per world rank
  std::vector<WaitSite> sites;
  std::vector<Culprit> culprits;
  std::vector<std::string> notes;  // other findings (a rank stuck in MPI_Init_thread, no culprit found, ...)
};

// dumps: parsed hang dumps (names: their files, for errors); headers: record-file header lines (may be
// empty). Throws ms::Error naming the file and field of a malformed dump.
Diagnosis diagnose_dumps(const std::vector<nlohmann::json>& dumps, const std::vector<std::string>& names,
                         const std::vector<nlohmann::json>& headers);
// Reads <run_dir>/hang/*.json and <run_dir>/records/rank-*.jsonl headers. No dump: an ms::Error.
Diagnosis diagnose_run(const std::string& run_dir);
// The report as text; every culprit has a line "culprit: rank R (tp=T,dp=D,pp=P): why".
std::string format_diagnosis(const Diagnosis& d);

}  // namespace ms
