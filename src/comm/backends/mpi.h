// backends/mpi: the MPI backend of communicator.h (OpenMPI; start with mpirun or srun --mpi=pmix).
// MPI is initialised with MPI_THREAD_MULTIPLE on the thread that calls make_mpi_world (a library
// that provides less is a CommError naming the level it provides): each communicator drives its
// MPI communicator from its own thread (comm_thread.h), several at the same time. Process-wide
// state (failure flag, bf16 ops, tag bound) is atomic or written once before any such thread runs;
// the in-place reduce-scatter scratch is per communicator. Ops are the nonblocking MPI
// collectives (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather, MPI_Ibcast,
// MPI_Ibarrier) and MPI_Isend/MPI_Irecv, polled with MPI_Test until the op deadline: a stalled
// peer becomes a CommError naming op, group and seq (and the peer for send/recv; MPI cannot tell
// which rank a collective waits on). bf16 is MPI_UINT16_T with user ops (sum: fp32 add, round to
// nearest even per addition; max). Counts must fit in an int. Sub-groups come from
// MPI_Comm_create_group (collective over the members only, run on the parent's thread).
// Failure behaviour: a killed rank makes mpirun abort the whole job within seconds (OpenMPI's
// default); a stopped rank ends in a CommError on the others after the timeout, after which MPI
// is not finalised (it would wait for the stopped rank): the process exits and mpirun ends the
// job. MPI_Finalize runs at normal process exit, after every communicator's thread has drained and
// been joined (comm_thread.h: stop_all_comm_threads).
#pragma once
#include <memory>

#include "comm/comm_env.h"       // CommEnv
#include "comm/communicator.h"  // Communicator

namespace ms {

// Initialises MPI (once per process) and returns MPI_COMM_WORLD as the world group. The rank and
// size in env, when set (non-zero size), must match MPI's.
std::unique_ptr<Communicator> make_mpi_world(const CommEnv& env);

}  // namespace ms
