// memory_choice: which in-memory copy of each rank's state a restart uses (memory_restore.h, step 2),
// a pure function of what every rank found, so every rank computes the same choice.
// Rules: a copy counts only if its layout is its owner's layout now and it is not known bad; the
// step is the newest one of which EVERY rank's state has a counted copy somewhere; it is used only if
// it is at least as new as the newest checkpoint on storage (else storage wins: never an older state
// than the disk's); for each rank its own copy (holder == owner: no transfer) comes first, else the
// copy of the lowest-numbered holder. No choice (std::nullopt) names the reason in `why`.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ms {

// One copy of a rank's state somewhere in the world (packed: it travels as raw bytes).
struct MemoryCopy {
  int32_t owner = -1, holder = -1, step = -1, slot = -1;
  uint64_t layout = 0;
};
static_assert(sizeof(MemoryCopy) % 4 == 0);

// The same copy (owner, holder, step and slot).
bool same_copy(const MemoryCopy& a, const MemoryCopy& b);

struct MemoryChoice {
  int step = -1;
  std::vector<MemoryCopy> use;  // per rank, the copy it loads
};

// copies: every copy every rank found; layout_of: each rank's layout now (its size is the world);
// disk_step: the newest step on storage (-1: none); bad: copies that failed their check.
std::optional<MemoryChoice> choose_memory_copies(const std::vector<MemoryCopy>& copies,
                                                 const std::vector<uint64_t>& layout_of, int disk_step,
                                                 const std::vector<MemoryCopy>& bad, std::string& why);

}  // namespace ms
