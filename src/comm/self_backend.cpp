// self_backend.cpp: see self_backend.h.
#include "comm/self_backend.h"

#include <cstring>  // std::memmove

namespace ms {

namespace {

class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator(std::string name, int world_rank, std::chrono::milliseconds timeout) {
    set_identity(std::move(name), 0, {world_rank}, timeout);
  }
  ~SelfCommunicator() override { drain(); }

  std::unique_ptr<Communicator> make_group(const std::vector<int>& members, const std::string& name) override {
    MS_CHECK(members.size() == 1 && members[0] == 0, "new_group '{}' of group '{}' (size 1): members must be {{0}}",
             name, name_);
    return std::make_unique<SelfCommunicator>(name, world_ranks_[0], timeout_);
  }

 protected:
  const char* backend_name() const override { return "self"; }
  void execute(Op& op) override {
    const size_t n = op.count * dtype_size(op.dtype);
    if ((op.kind == OpKind::kReduceScatter || op.kind == OpKind::kAllGather) && n && op.in != op.out)
      std::memmove(op.out, op.in, n);
    MS_CHECK(op.kind != OpKind::kSend && op.kind != OpKind::kRecv, "{} needs a peer", op.name);
  }
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(std::string name, int world_rank, std::chrono::milliseconds timeout) {
  return std::make_unique<SelfCommunicator>(std::move(name), world_rank, timeout);
}

}  // namespace ms
