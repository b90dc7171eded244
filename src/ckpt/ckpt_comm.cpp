// ckpt_comm.cpp: see ckpt_comm.h.
#include "ckpt/ckpt_comm.h"

#include <cstdint>
#include <cstring>  // std::memcpy
#include <vector>

#include "comm/communicator.h"  // Communicator

namespace ms {

void broadcast_text(Communicator* group, std::string& text, int root) {
  if (!group || group->size() == 1) return;
  // The length as two exact fp32 integers (< 2^24 each), then the bytes packed into fp32 words.
  const uint64_t n = text.size();
  float len[2] = {static_cast<float>(n >> 24), static_cast<float>(n & 0xFFFFFF)};
  group->broadcast(len, 2, DType::kF32, root);
  const uint64_t m = (static_cast<uint64_t>(len[0]) << 24) | static_cast<uint64_t>(len[1]);
  std::vector<float> words((m + 3) / 4);
  if (group->rank() == root && m) std::memcpy(words.data(), text.data(), m);
  if (!words.empty()) group->broadcast(words.data(), words.size(), DType::kF32, root);
  text.assign(reinterpret_cast<const char*>(words.data()), m);
}

bool any_rank(Communicator* group, bool flag) { return any_rank(group, flag, false).first; }

std::pair<bool, bool> any_rank(Communicator* group, bool a, bool b) {
  const std::vector<bool> v = any_rank_each(group, {a, b});
  return {v[0], v[1]};
}

std::vector<bool> any_rank_each(Communicator* group, const std::vector<bool>& flags) {
  if (!group || group->size() == 1 || flags.empty()) return flags;
  std::vector<float> v(flags.size());
  for (size_t i = 0; i < flags.size(); i++) v[i] = flags[i] ? 1.0f : 0.0f;
  group->all_reduce(v.data(), v.size(), DType::kF32, ReduceOp::kMax);
  std::vector<bool> out(flags.size());
  for (size_t i = 0; i < flags.size(); i++) out[i] = v[i] > 0.5f;
  return out;
}

}  // namespace ms
