// world: init_world, the one place that turns a CommEnv into the world communicator on the
// configured engine: "self" (always built), "gloo" (MEGASCALE_WITH_GLOO), "mpi"
// (MEGASCALE_WITH_MPI) or "nccl" (MEGASCALE_WITH_NCCL: GPU buffers). Asking for a backend this
// build lacks is an error naming the CMake option.
#pragma once
#include <memory>
#include <string>

#include "comm/comm_env.h"       // CommEnv
#include "comm/communicator.h"  // Communicator

namespace ms {

// The world group of this process, on env.backend. Rendezvous happens here (bounded by env.timeout;
// an unreachable store or a world size that does not match is an Error naming the store). Also sets
// the communication trace's ring size (env.trace_capacity).
std::unique_ptr<Communicator> init_world(const CommEnv& env);
// Whether this build has backend `name` ("self", "gloo", "mpi", "nccl").
bool backend_built(const std::string& name);

}  // namespace ms
