// world.cpp: see world.h.
#include "comm/world.h"

#include "comm/self_backend.h"  // make_self_communicator
#include "obs/trace_sink.h"     // TraceSink
#if MEGASCALE_HAVE_GLOO
#include "comm/backends/gloo.h"  // make_gloo_world
#endif
#if MEGASCALE_HAVE_MPI
#include "comm/backends/mpi.h"  // make_mpi_world
#endif
#if MEGASCALE_HAVE_NCCL
#include "comm/backends/nccl.h"  // make_nccl_world
#endif

namespace ms {

bool backend_built(const std::string& name) {
  if (name == "self") return true;
#if MEGASCALE_HAVE_GLOO
  if (name == "gloo") return true;
#endif
#if MEGASCALE_HAVE_MPI
  if (name == "mpi") return true;
#endif
#if MEGASCALE_HAVE_NCCL
  if (name == "nccl") return true;
#endif
  return false;
}

std::unique_ptr<Communicator> init_world(const CommEnv& env) {
  TraceSink::get().set_capacity(TraceTrack::kComm, env.trace_capacity);
  MS_CHECK(env.timeout.count() > 0, "comm timeout must be positive, got {} ms", env.timeout.count());
  if (env.backend == "self") {
    MS_CHECK(env.world_size == 1 && env.rank == 0, "backend 'self' runs one process, but the world size is {} "
             "(rank {}): use gloo or mpi", env.world_size, env.rank);
    return make_self_communicator("world", 0, env.timeout);
  }
  if (env.backend == "gloo") {
#if MEGASCALE_HAVE_GLOO
    return make_gloo_world(env);
#else
    MS_FAIL("backend 'gloo' is not in this build (configure with -DMEGASCALE_WITH_GLOO=ON)");
#endif
  }
  if (env.backend == "mpi") {
#if MEGASCALE_HAVE_MPI
    return make_mpi_world(env);
#else
    MS_FAIL("backend 'mpi' is not in this build (configure with -DMEGASCALE_WITH_MPI=ON)");
#endif
  }
  if (env.backend == "nccl") {
#if MEGASCALE_HAVE_NCCL
    return make_nccl_world(env);
#else
    MS_FAIL("backend 'nccl' is not in this build (it needs CUDA, Gloo and libnccl: configure with "
            "-DMEGASCALE_WITH_NCCL=ON where nvcc and NCCL are installed)");
#endif
  }
  MS_FAIL("unknown comm backend '{}' (gloo, mpi, nccl or self)", env.backend);
}


}  // namespace ms
