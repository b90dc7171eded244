// backends/mpi: the MPI backend of communicator.h (OpenMPI; start with mpirun or srun --mpi=pmix).
// MPI is initialised (MPI_THREAD_SERIALIZED or better) on the communication thread, and every MPI
// call stays on that thread. Ops are the nonblocking MPI collectives (MPI_Iallreduce,
// MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast, MPI_Ibarrier) and MPI_Isend/MPI_Irecv,
// polled with MPI_Test until the op deadline: a stalled peer becomes a CommError naming op, group
// and seq (and the peer for send/recv; MPI cannot tell which rank a collective waits on). bf16 is
// MPI_UINT16_T with user ops (sum: fp32 add, round to nearest even per addition; max). Counts must
// fit in an int. Sub-groups come from MPI_Comm_create_group (collective over the members only).
// Failure behaviour: a killed rank makes mpirun abort the whole job within seconds (OpenMPI's
// default); a stopped rank ends in a CommError on the others after the timeout, after which MPI
// is not finalised (it would wait for the stopped rank): the process exits and mpirun ends the
// job. MPI_Finalize runs at normal process exit, after the communication thread has drained.
#pragma once
#include <memory>

#include "comm/comm_env.h"       // CommEnv
#include "comm/communicator.h"  // Communicator

namespace ms {

// Initialises MPI (once per process) and returns MPI_COMM_WORLD as the world group. The rank and
// size in env, when set (non-zero size), must match MPI's.
std::unique_ptr<Communicator> make_mpi_world(const CommEnv& env);

}  // namespace ms
