// memory_restore.cpp: see memory_restore.h.
#include "ckpt/memory_restore.h"

#include <algorithm>  // std::max, std::min
#include <cstdio>     // std::sscanf
#include <cstring>    // std::memcpy
#include <filesystem>
#include <optional>
#include <unistd.h>   // gethostname
#include <set>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <xxhash.h>

#include "base/check.h"               // MS_CHECK
#include "base/clock.h"               // Stopwatch
#include "ckpt/memory_checkpointer.h" // memory_layout_hash
#include "ckpt/memory_choice.h"       // choose_memory_copies
#include "ckpt/memory_snapshot.h"     // SnapshotFile, check_snapshot
#include "comm/communicator.h"
#include "comm/rank_grid.h"           // RankLayout: the data-parallel group
#include "obs/run_recorder.h"         // TraceScope
#include "parallel/parallel_model.h"

namespace ms {
namespace fs = std::filesystem;

namespace {

constexpr int kMaxCopies = kOwnSnapshotSlots + 16;  // own slots + 2 per source, up to 8 sources (memory_replicas <= 8)

using Copy = MemoryCopy;
struct RankInfo {
  uint64_t layout = 0;  // this rank's own layout now
  uint64_t folder = 0;  // its memory folder (host name and path): equal values see the same files
  int32_t disk_step = -1;
  int32_t count = 0;
  Copy copies[kMaxCopies];
};
static_assert(sizeof(RankInfo) % 4 == 0);

uint32_t header_tag() { return 0x4d520000u; }
uint32_t payload_tag() { return 0x4d520001u; }

// Raw bytes through a collective that moves float elements (no arithmetic: the bits are kept).
template <class T>
std::vector<T> all_gather_raw(Communicator* g, const T& mine) {
  const int n = g ? g->size() : 1;
  std::vector<T> all(static_cast<size_t>(n));
  if (!g) {
    all[0] = mine;
    return all;
  }
  g->all_gather(&mine, all.data(), sizeof(T) / 4, DType::kF32);
  return all;
}

// This rank's copies: its own snapshots and the replicas it holds (header checks, no hash yet).
std::vector<std::pair<Copy, std::string>> scan(const std::string& dir, int me, uint64_t layout) {
  std::vector<std::pair<Copy, std::string>> out;
  if (dir.empty() || !fs::is_directory(dir)) return out;
  auto add = [&](const std::string& path, int owner, int slot, const uint64_t* want_layout) {
    std::optional<SnapshotFile> f = SnapshotFile::open(path);
    if (!f || f->file_bytes() < kSnapshotHeaderBytes) return;
    const SnapshotHeader& h = f->header();
    // A replica's layout is its owner's (known to the owner only): checked in the agreement.
    if (!check_snapshot(*f, want_layout ? *want_layout : h.layout, false).empty() || h.rank != owner) return;
    out.push_back({Copy{owner, me, h.step, slot, h.layout}, path});
  };
  for (int s = 0; s < kOwnSnapshotSlots; s++) add(dir + "/" + own_snapshot_name(me, s), me, s, &layout);
  for (const auto& e : fs::directory_iterator(dir)) {
    int holder = -1, owner = -1, slot = -1;
    const std::string name = e.path().filename().string();
    if (std::sscanf(name.c_str(), "rep-h%d-o%d-s%d.snap", &holder, &owner, &slot) == 3 && holder == me &&
        name == replica_snapshot_name(holder, owner, slot))
      add(e.path().string(), owner, slot, nullptr);
  }
  if (out.size() > kMaxCopies) out.resize(kMaxCopies);  // (cannot happen with <= 8 sources)
  return out;
}

uint64_t folder_key(const std::string& dir) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::error_code ec;
  const std::string key = std::string(host) + ":" + fs::weakly_canonical(dir, ec).string();
  return XXH64(key.data(), key.size(), 0);
}

// The other data-parallel replicas' chosen copies, when every one of them and every rank of the
// group sit at one memory folder (this host's): their weights are read from those files instead of
// the all-gather. Empty when they do not, or a file cannot be opened as the agreement says.
// `group`: this rank's data-parallel group (world ranks by data-parallel rank).
std::vector<std::pair<int, SnapshotFile>> replica_copies_here(const std::vector<int>& group, CheckpointRank who,
                                                              const std::string& dir,
                                                              const std::vector<RankInfo>& all,
                                                              const MemoryChoice& c) {
  std::vector<std::pair<int, SnapshotFile>> out;
  if (group.size() <= 1 || dir.empty()) return out;
  const uint64_t here = all[static_cast<size_t>(who.rank)].folder;
  for (int r : group) {
    const Copy& u = c.use[static_cast<size_t>(r)];
    if (all[static_cast<size_t>(r)].folder != here || all[static_cast<size_t>(u.holder)].folder != here) return {};
  }
  for (int q = 0; q < static_cast<int>(group.size()); q++) {
    const int p = group[static_cast<size_t>(q)];
    if (p == who.rank) continue;
    const Copy& u = c.use[static_cast<size_t>(p)];
    const std::string path =
        dir + "/" + (u.holder == p ? own_snapshot_name(p, u.slot) : replica_snapshot_name(u.holder, p, u.slot));
    std::optional<SnapshotFile> f = SnapshotFile::open(path);
    // Verified (XXH64) by its holder in this restore's agreement; the header must still say so.
    if (!f || !check_snapshot(*f, u.layout, false).empty() || f->header().step != c.step ||
        f->header().rank != p || f->header().payload_bytes % sizeof(float) != 0)
      return {};
    out.emplace_back(q, std::move(*f));
  }
  return out;
}

// choose_memory_copies over what every rank found.
std::optional<MemoryChoice> choose(const std::vector<RankInfo>& all, const std::vector<Copy>& bad, std::string& why) {
  std::vector<Copy> copies;
  std::vector<uint64_t> layout_of;
  for (const RankInfo& info : all) {
    layout_of.push_back(info.layout);
    copies.insert(copies.end(), info.copies, info.copies + info.count);
  }
  return choose_memory_copies(copies, layout_of, all[0].disk_step, bad, why);
}

}  // namespace

bool memory_copies_present(const std::string& dir, int rank) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return false;
  const std::string own = fmt::format("own-r{:05d}-", rank), held = fmt::format("rep-h{:05d}-", rank);
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(own) || name.starts_with(held)) return true;
  }
  return false;
}

MemoryRestoreResult restore_from_memory(const Config& cfg, ParallelModel& model, Communicator* group,
                                        CheckpointRank who, const std::string& dir,
                                        int disk_step) {
  TraceScope span("memory-restore");
  const Stopwatch total;
  MemoryRestoreResult res;
  const std::vector<StateRun> runs = model.own_state_runs();
  const uint64_t layout = memory_layout_hash(cfg, who.rank, who.world, runs);
  Stopwatch w;
  const auto found = scan(dir, who.rank, layout);
  RankInfo mine;
  mine.layout = layout, mine.disk_step = disk_step, mine.count = static_cast<int32_t>(found.size());
  mine.folder = folder_key(dir);
  for (size_t i = 0; i < found.size(); i++) mine.copies[i] = found[i].first;
  res.scan_seconds = w.seconds();
  w.restart();
  const std::vector<RankInfo> all = all_gather_raw(group, mine);
  res.agree_seconds = w.seconds();
  std::vector<Copy> bad;
  std::optional<MemoryChoice> c;
  for (res.rounds = 1; res.rounds <= 4; res.rounds++) {
    c = choose(all, bad, res.why_not);
    if (!c) return res;
    // Verify every copy this rank uses or sends; the failures go round to every rank.
    w.restart();
    struct Failures { int32_t count = 0; Copy bad[kMaxCopies]; } f;
    for (const auto& [copy, path] : found) {
      const Copy& u = c->use[static_cast<size_t>(copy.owner)];
      if (!same_copy(u, copy)) continue;
      const std::optional<SnapshotFile> file = SnapshotFile::open(path);
      if (!file || !check_snapshot(*file, copy.layout, true).empty()) f.bad[f.count++] = copy;
    }
    res.verify_seconds += w.seconds();
    int failed = 0;
    for (const Failures& x : all_gather_raw(group, f))
      for (int i = 0; i < x.count; i++) bad.push_back(x.bad[i]), failed++;
    if (failed == 0) break;
  }
  if (res.rounds > 4) {
    res.why_not = "copies kept failing their checks";
    return res;
  }
  // Transfers: holders send, owners without their own copy receive (every transfer at once).
  w.restart();
  const Copy& use = c->use[static_cast<size_t>(who.rank)];
  std::vector<uint8_t> received;
  const SnapshotHeader* header = nullptr;
  SnapshotHeader in{};
  std::optional<SnapshotFile> own_file;
  std::vector<std::optional<SnapshotFile>> sending;
  std::vector<CommWork> works;
  for (const auto& [copy, path] : found) {
    const Copy& u = c->use[static_cast<size_t>(copy.owner)];
    if (!same_copy(u, copy)) continue;
    if (copy.owner == who.rank) {
      own_file = SnapshotFile::open(path);
      continue;
    }
    sending.push_back(SnapshotFile::open(path));
    const SnapshotFile& s = *sending.back();
    works.push_back(group->start_send(&s.header(), sizeof(SnapshotHeader), copy.owner, header_tag()));
    works.push_back(group->start_send(s.payload(), s.header().payload_bytes, copy.owner, payload_tag()));
  }
  if (use.holder != who.rank) {
    group->recv(&in, sizeof in, use.holder, header_tag());
    received.resize(in.payload_bytes);
    group->recv(received.data(), received.size(), use.holder, payload_tag());
    res.bytes_received = received.size();
    MS_CHECK(XXH64(received.data(), received.size(), 0) == in.payload_xxh64 && in.layout == layout,
             "in-memory restore: rank {}'s state from rank {} arrived corrupted or for another layout", who.rank,
             use.holder);
    header = &in;
    res.source = fmt::format("peer {}", use.holder);
  } else {
    MS_CHECK(own_file.has_value(), "in-memory restore: rank {}'s own copy of step {} vanished", who.rank, c->step);
    header = &own_file->header();
    res.source = "local";
  }
  for (CommWork& x : works) x.wait();
  res.transfer_seconds = w.seconds();
  // Load: this rank's runs straight into its shards; under ZeRO the weights complete with the
  // all-gather that follows every update, or, where the whole data-parallel group restores from
  // copies in this host's folder, from the other replicas' files (the same bits, no collective).
  w.restart();
  MS_CHECK(header->step == c->step && header->payload_bytes % sizeof(float) == 0,
           "in-memory restore: rank {}'s copy says step {}, agreed {}", who.rank, header->step, c->step);
  const std::vector<int> dp_group =
      RankLayout(cfg.parallel.order, GridShape{cfg.parallel.tp, cfg.parallel.dp, cfg.parallel.pp}, who.world)
          .group(ParallelDim::kDp, who.rank);
  std::vector<std::pair<int, SnapshotFile>> here = replica_copies_here(dp_group, who, dir, all, *c);
  // Every rank of a group must choose alike: a file one rank cannot open sends its group to the all-gather.
  struct Flag { int32_t ok = 0; } flag{here.empty() ? 0 : 1};
  const std::vector<Flag> flags = all_gather_raw(group, flag);
  for (int r : dp_group)
    if (!flags[static_cast<size_t>(r)].ok) here.clear();
  std::vector<ParallelModel::PeerRuns> peers;
  for (const auto& [q, f] : here)
    peers.push_back({q, reinterpret_cast<const float*>(f.payload()), f.header().payload_bytes / sizeof(float)});
  res.weights_from_files = !peers.empty();
  const uint8_t* p = use.holder == who.rank ? own_file->payload() : received.data();
  model.load_own_runs(reinterpret_cast<const float*>(p), header->payload_bytes / sizeof(float), c->step, peers);
  res.load_seconds = w.seconds();
  res.restored = true;
  res.step = c->step;
  res.data = DataLoader::Position{header->data_epoch, header->data_index};
  res.tokens = header->tokens, res.loss = header->loss;
  res.seconds = total.seconds();
  return res;
}

}  // namespace ms
