// ckpt_comm: the few agreements checkpointing needs over the world group, on the backends' fp32
// collectives (bytes travel as fp32 bit patterns; a broadcast copies them unchanged).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace ms {

class Communicator;

// root's text on every rank (no-op for a null or single-rank group).
void broadcast_text(Communicator* group, std::string& text, int root = 0);
// True on every rank if `flag` is true on any rank.
bool any_rank(Communicator* group, bool flag);
// The same for two flags in one all-reduce.
std::pair<bool, bool> any_rank(Communicator* group, bool a, bool b);
// The same for any number of flags in one all-reduce: element i is true if flags[i] is on any rank.
std::vector<bool> any_rank_each(Communicator* group, const std::vector<bool>& flags);

}  // namespace ms
