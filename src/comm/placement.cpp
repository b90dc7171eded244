// placement.cpp: see placement.h.
#include "comm/placement.h"

#include <unistd.h>  // gethostname

#include <algorithm>  // std::min, std::find
#include <cstring>    // std::memcpy
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "base/dtype.h"          // DType
#include "comm/comm_env.h"       // CommEnv
#include "comm/communicator.h"   // Communicator

namespace ms {

std::string this_rank_host(const CommEnv& env) {
  if (env.hostname != "127.0.0.1" && !env.hostname.empty()) return env.hostname;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::vector<std::string> gather_rank_hosts(Communicator& world, const std::string& mine) {
  // 64 bytes per rank, carried as 16 fp32 words (the collectives move element types they can sum;
  // a gather only copies the bits).
  constexpr size_t kWidth = 64;
  std::vector<char> in(kWidth, 0), out(kWidth * static_cast<size_t>(world.size()), 0);
  std::memcpy(in.data(), mine.data(), std::min(mine.size(), kWidth - 1));
  world.all_gather(in.data(), out.data(), kWidth / sizeof(float), DType::kF32);
  std::vector<std::string> hosts;
  for (int r = 0; r < world.size(); r++) hosts.emplace_back(out.data() + static_cast<size_t>(r) * kWidth);
  return hosts;
}

PlacementReport placement_report(const RankLayout& layout, const std::vector<std::string>& hosts) {
  PlacementReport rep;
  const std::set<std::string> distinct(hosts.begin(), hosts.end());
  if (distinct.size() <= 1) return rep;
  std::vector<std::string> order;  // hosts in the order of their first rank
  for (const std::string& h : hosts)
    if (std::find(order.begin(), order.end(), h) == order.end()) order.push_back(h);
  for (const std::string& h : order) {
    std::string line = "host " + h + ": ranks";
    const char* sep = " ";
    for (int r = 0; r < static_cast<int>(hosts.size()); r++)
      if (hosts[r] == h) {
        line += fmt::format("{}{} ({})", sep, r, layout.rank_label(r));
        sep = ", ";
      }
    rep.lines.push_back(line);
  }
  std::set<std::string> seen;
  for (int r = 0; r < static_cast<int>(hosts.size()); r++) {
    const std::vector<int> g = layout.group(ParallelDim::kTp, r);
    if (g.size() < 2 || !seen.insert(layout.group_name(ParallelDim::kTp, r)).second) continue;
    std::set<std::string> on;
    for (int m : g) on.insert(hosts[m]);
    if (on.size() > 1)
      rep.warnings.push_back(fmt::format("tensor-parallel group {} spans {} hosts ({}): its collectives sit on every "
                                         "layer's critical path; keep TP inside a host (parallel.order with tp "
                                         "innermost and a tp that divides the ranks per host)",
                                         layout.group_name(ParallelDim::kTp, r), on.size(), fmt::join(on, ", ")));
  }
  return rep;
}

}  // namespace ms
