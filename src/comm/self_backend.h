// self_backend: the communicator of a one-process world (no engine): collectives are copies or
// nothing, send/recv is an error (there is no peer). Always built, whatever backends are enabled.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "comm/communicator.h"

namespace ms {

std::unique_ptr<Communicator> make_self_communicator(std::string name, int world_rank, std::chrono::milliseconds timeout);

}  // namespace ms
