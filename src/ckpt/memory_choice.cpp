// memory_choice.cpp: see memory_choice.h.
#include "ckpt/memory_choice.h"

#include <set>

#include <fmt/format.h>

namespace ms {

bool same_copy(const MemoryCopy& a, const MemoryCopy& b) {
  return a.owner == b.owner && a.holder == b.holder && a.step == b.step && a.slot == b.slot;
}

std::optional<MemoryChoice> choose_memory_copies(const std::vector<MemoryCopy>& copies,
                                                 const std::vector<uint64_t>& layout_of, int disk_step,
                                                 const std::vector<MemoryCopy>& bad, std::string& why) {
  const int n = static_cast<int>(layout_of.size());
  auto counted = [&](const MemoryCopy& c) {
    if (c.owner < 0 || c.owner >= n || c.layout != layout_of[static_cast<size_t>(c.owner)]) return false;
    for (const MemoryCopy& b : bad)
      if (same_copy(b, c)) return false;
    return true;
  };
  std::set<int> common;
  for (int r = 0; r < n; r++) {
    std::set<int> steps;
    for (const MemoryCopy& c : copies)
      if (c.owner == r && counted(c)) steps.insert(c.step);
    std::set<int> both;
    for (int s : steps)
      if (r == 0 || common.count(s)) both.insert(s);
    common = both;
    if (common.empty()) {
      why = fmt::format("no step of rank {}'s state has a complete copy in memory that every other rank also has", r);
      return std::nullopt;
    }
  }
  MemoryChoice c;
  c.step = *common.rbegin();
  if (c.step < disk_step) {
    why = fmt::format("the newest step in memory ({}) is older than the newest checkpoint on storage ({})", c.step,
                      disk_step);
    return std::nullopt;
  }
  for (int r = 0; r < n; r++) {
    const MemoryCopy* best = nullptr;
    for (const MemoryCopy& x : copies) {
      if (x.owner != r || x.step != c.step || !counted(x)) continue;
      const bool own = x.holder == r, best_own = best && best->holder == r;
      if (!best || own > best_own || (!own && !best_own && x.holder < best->holder)) best = &x;
    }
    c.use.push_back(*best);  // exists: c.step is one of rank r's counted steps
  }
  return c;
}

}  // namespace ms
