// comm_fatal: what a failed communication op does to the process, and how a rank ends at once.
//  - Library default (no handler): the op's CommError reaches whoever waits on it (tests, tools,
//    callers that rebuild the world). Under MPI a timed-out collective's request is then abandoned
//    while MPI may still write into its buffer: such a caller must keep the buffer alive until the
//    process ends (timed-out send/recv requests are cancelled first, comm/backends/mpi.cpp).
//  - set_comm_failure_handler installs the fatal policy (the train app: obs/watchdog.h dumps, then
//    ends the rank with exit code 86): the handler runs on the failed op's communication thread,
//    after the op's trace record is closed and before anyone waiting on the op wakes, and must not
//    return; so no caller unwinds past a buffer an engine still owns.
//  - end_process_now ends the process without waiting on peers, unwinding, MPI_Finalize or joining
//    threads: MPI_Abort where MPI is in use (mpirun then ends the job), else _exit.
// Thread-safe (atomics).
#pragma once
#include <chrono>
#include <string>

namespace ms {

using CommFailureHandler = void (*)(const std::string& what);
// nullptr restores the default (throw).
void set_comm_failure_handler(CommFailureHandler h);
bool comm_failure_fatal();
// Called by the communicator for every failed op (what: op, group, seq, peer and the reason). Calls
// the handler if one is installed (which does not return); otherwise returns.
void report_comm_failure(const std::string& what);

[[noreturn]] void end_process_now(int code);

namespace detail {
// The MPI backend registers MPI_Abort here once MPI is initialised (and unregisters at finalize).
void set_process_abort(void (*abort_fn)(int code));
// Every communicator's deadline is noted; comm_timeout() is the longest (bound of exit-time joins).
void note_comm_timeout(std::chrono::milliseconds t);
std::chrono::milliseconds comm_timeout();
}  // namespace detail

}  // namespace ms
