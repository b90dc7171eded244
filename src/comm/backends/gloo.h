// backends/gloo: the Gloo backend of communicator.h (TCP transport, no MPI needed).
// Rendezvous goes through a store named by CommEnv::store: "file:/dir" (a shared folder, created if
// missing) or "redis://host:port" (optional AUTH with CommEnv::store_password). Keys live under
// CommEnv::run_id, so runs sharing a store do not mix; a store that already holds this run's keys
// is an error (use a fresh run id or folder). A redis address that does not accept a TCP
// connection within min(timeout, 5 s) is a CommError naming it (hiredis itself would block).
// Collectives are direct exchanges over Gloo unbound buffers: reduce-scatter sends shard j to rank
// j and every rank reduces the n contributions of its shard in rank order 0..n-1 (same bits on
// every rank, whatever the order of arrival); all-gather and broadcast send each piece straight to
// its destination; all-reduce = reduce-scatter + all-gather over n near-equal chunks. bf16 sums
// add in fp32 and round to nearest even after every addition (as the MPI backend does).
// Every wait is bounded by the op deadline; a timeout or a broken connection is a CommError naming
// the peer being waited on. After a CommError the group's connections are closed and every later
// op on it fails at once: rebuild the world to continue. SIGPIPE is ignored from make_gloo_world
// on (unless the program installed a handler), so a dead peer is an error, not a signal.
// Each group has its own Gloo context, driven by its own thread (comm_thread.h) concurrently with
// the other groups'; what groups share is safe for that: the TCP device (thread-safe by design)
// and the store, whose calls are serialised (a group connects on its parent's thread).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_env.h"       // CommEnv
#include "comm/communicator.h"  // Communicator

namespace ms {

// Rendezvous of env.world_size processes through env.store; the world group of this process.
std::unique_ptr<Communicator> make_gloo_world(const CommEnv& env);
// The store as a rendezvous for another engine (NCCL's unique id): the root sets `key` (under
// env.run_id) to `value`, every rank waits for it (bounded by env.timeout) and returns it. A
// CommError names the store, run, key and rank on failure.
std::vector<char> store_share(const CommEnv& env, const std::string& key, const std::vector<char>& value, bool root);

}  // namespace ms
