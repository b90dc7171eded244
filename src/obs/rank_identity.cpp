// rank_identity.cpp: see rank_identity.h.
#include "obs/rank_identity.h"

#include <unistd.h>

#include <mutex>

#include <fmt/format.h>


namespace ms {
namespace {
std::mutex g_mu;
RankIdentity* g_id = nullptr;  // never destroyed: read by threads that may run during exit
}  // namespace

void set_rank_identity(RankIdentity id) {
  if (id.host.empty()) {
    char h[256] = {};
    if (gethostname(h, sizeof h - 1) == 0) id.host = h;
  }
  if (id.pid == 0) id.pid = static_cast<int>(getpid());
  std::lock_guard lk(g_mu);
  if (!g_id) g_id = new RankIdentity();
  *g_id = std::move(id);
}

RankIdentity rank_identity() {
  std::lock_guard lk(g_mu);
  if (g_id) return *g_id;
  RankIdentity id;
  id.pid = static_cast<int>(getpid());
  return id;
}

std::string describe_rank(int rank, int tp, int dp, int pp) {
  return fmt::format("rank {} (pp={} dp={} tp={})", rank, pp, dp, tp);
}

nlohmann::json identity_json(const RankIdentity& id) {
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [name, members] : id.groups) groups[name] = members;
  return {{"rank", id.rank},
          {"world", id.world},
          {"coord", {{"tp", id.tp}, {"dp", id.dp}, {"pp", id.pp}}},
          {"shape", {{"tp", id.tp_size}, {"dp", id.dp_size}, {"pp", id.pp_size}}},
          {"order", id.order},
          {"host", id.host},
          {"pid", id.pid},
          {"backend", id.backend},
          {"groups", groups}};
}

}  // namespace ms
