// comm_env: where this process sits in the job and how it finds the others, read from the
// environment a launcher sets (megascale launch: torchrun-style variables; mpirun / srun: their own).
// Guarantees: malformed values are an ms::Error naming the variable; nothing else reads these
// variables.
#pragma once
#include <chrono>
#include <cstddef>
#include <string>

namespace ms {

// Where this process sits and how it finds the others; filled from the launcher's environment.
struct CommEnv {
  std::string backend = "self";  // "gloo", "mpi" or "self" (one process, no engine)
  int rank = 0;                  // RANK (gloo) / OMPI_COMM_WORLD_RANK / PMIX_RANK / SLURM_PROCID (mpi)
  int world_size = 1;            // WORLD_SIZE / OMPI_COMM_WORLD_SIZE / SLURM_NTASKS
  int local_rank = 0;            // LOCAL_RANK / OMPI_COMM_WORLD_LOCAL_RANK / SLURM_LOCALID
  int local_world_size = 1;      // LOCAL_WORLD_SIZE / OMPI_COMM_WORLD_LOCAL_SIZE
  std::string store;             // gloo rendezvous: "file:/dir" or "redis://host:port" (MEGASCALE_STORE)
  std::string store_password;    // redis AUTH password, empty for none (MEGASCALE_STORE_PASSWORD)
  std::string run_id = "run";    // key prefix in the store, so runs sharing a store do not mix (MEGASCALE_RUN_ID)
  std::string hostname = "127.0.0.1";  // address the gloo transport binds to (MEGASCALE_HOST; "auto": the first
                                       // IPv4 interface that is up besides loopback, the default under srun)
  int host_index = -1;           // the driver's host of this process, -1 without a driver (MEGASCALE_HOST_INDEX;
                                 // emulated hosts share a machine, so per-machine resources key on it)
  std::chrono::milliseconds timeout{300000};  // deadline of every op and of rendezvous
  size_t trace_capacity = 4096;               // ops kept in the ring buffer

  // Reads the variables above. backend: MEGASCALE_BACKEND if set, else "mpi" under mpirun/srun
  // (OMPI_COMM_WORLD_SIZE, PMIX_RANK), else "gloo" when WORLD_SIZE is set or in an srun step of
  // several tasks without PMIx (SLURM_STEP_ID; rank, world, local rank, ranks per node and host from
  // SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE, SLURM_NODEID; the run id
  // slurm-<job>.<step>; MEGASCALE_HOST auto), else "self".
  // Malformed values are an Error naming the variable.
  static CommEnv from_environment();
};

// The first IPv4 address of an interface that is up and not loopback (MEGASCALE_HOST=auto); an
// Error naming the variable when there is none.
std::string first_interface_address();

}  // namespace ms
