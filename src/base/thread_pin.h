// thread_pin: pins the OpenMP compute threads of this process to CPUs, one thread per CPU, so the
// scheduler never migrates a GEMM worker mid-kernel. Ranks sharing a machine take disjoint slices:
// thread i of the rank with local rank r runs on the (r * threads + i)-th CPU this process may use
// (modulo their count). Other threads (data prefetch, communication) keep the process's original
// CPU set: call restore_thread_affinity() at their start if they are created after pinning.
#pragma once
#include <string>

namespace ms {

// Pins the threads of the current OpenMP team size (omp_get_max_threads). Returns a one-line
// description ("threads 0,1 -> CPUs 0,1"). An Error when the kernel refuses.
std::string pin_omp_threads(int local_rank = 0);

// Gives the calling thread the CPU set the process had before pinning (no-op if never pinned).
void restore_thread_affinity();

}  // namespace ms
