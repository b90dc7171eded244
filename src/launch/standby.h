// standby: warm rank processes (issue 37's warm spares). An executor may start a rank's program
// ahead of need: exec, the dynamic loader (cuBLAS, NCCL, oneDNN: ~0.15 s of a cold start here),
// static initialisation and the argument and config parsing are done, then the process waits for
// its assignment: the rank's environment (RANK, WORLD_SIZE, the rendezvous store, the attempt, ...)
// as one JSON object on one line of its stdin (a pipe from the executor). Taking a standby costs
// writing that line, not a process start; a spare host's executor keeps standbys of the job's
// command, so taking the spare costs a rendezvous.
// The rank side is opt-in: a program waits only where it calls await_standby_assignment() (the
// `megascale train` command does, before anything reads the rank's environment); the driver asks
// executors for standbys only of such a command.
// Guarantees: the assignment is applied in full (setenv of every name) before the call returns,
// stdin is /dev/null afterwards and MEGASCALE_STANDBY no longer set (children see a plain rank); a
// standby whose pipe ends without an assignment (not needed, or its executor gone) exits 0 at once,
// having done nothing.
#pragma once
#include <map>
#include <string>

namespace ms::launch {

// Set (to "1") in a standby's environment by the executor that starts it.
inline constexpr const char* kStandbyEnv = "MEGASCALE_STANDBY";

// The line the executor writes to a standby's stdin (with its '\n').
std::string encode_standby_assignment(const std::map<std::string, std::string>& env);

// Rank side. Without MEGASCALE_STANDBY: returns false at once. With it: blocks until the
// assignment line arrives on stdin, applies it and returns true; at the end of stdin without a
// line, exits the process with 0; a malformed line is an ms::Error naming it.
bool await_standby_assignment();

}  // namespace ms::launch
