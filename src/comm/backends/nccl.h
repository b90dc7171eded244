// backends/nccl: the NCCL backend of communicator.h: collectives and send/recv on GPU memory, each
// group on CUDA streams of its own (one for collectives, one each for sends and receives).
// Start-up: rank 0's ncclUniqueId travels through the rendezvous store the Gloo backend uses
// (CommEnv::store, file or Redis: MegaScale's fast start, no TCP mesh); a world of one needs no
// store. Communicators are created non-blocking, so initialisation has the op deadline too.
// Groups: Communicator::split (RankGrid's tp / dp / pp groups, every rank of the parent taking
// part) is one ncclCommSplit, without a store round trip; new_group (a subset of the parent's ranks,
// e.g. the tied embedding's first and last stage) shares a fresh unique id through the store.
// Guarantees:
//  - Stream order: an op on device buffers (StreamOrder device kCuda) makes its stream wait on the
//    producer's event first, so it starts after the compute that wrote its input, never on a host
//    return; once enqueued its completion event is handed to CommWork::wait_on, so a consumer
//    stream waits on the device, not on the host.
//  - Host buffers (the rank-order scalar sums, losses) are copied through device memory of the
//    group's; the op completes after the copy back.
//  - Deadline: the group's thread polls the op's completion event and ncclCommGetAsyncError until
//    the op's deadline. A stuck op (a peer that never comes, a stream held by other work) calls
//    ncclCommAbort and ends in a CommError naming op, group and sequence (NCCL cannot name the
//    peer); the group is unusable afterwards, as with the other engines.
//  - Sums are NCCL's (deterministic for one topology and size, not in rank order): layouts compared
//    across engines agree within tolerances, not bit for bit. bf16 is ncclBfloat16.
//  - Send/recv are posted on the group's send and receive streams (two-phase, as with Gloo). NCCL
//    only promises progress to sends and receives that must complete together when they are fused
//    in one ncclGroupStart/End, which this backend does not do: sequential exchanges (a restore's
//    root sending to each rank in turn) are fine, the pipeline's concurrent posts are not, so
//    parallel.backend='nccl' with parallel.pp > 1 is a config error.
//  - One process per GPU: the process's current device (train.device picks LOCAL_RANK's). NCCL
//    before 2.30 refuses two ranks of a communicator on one GPU; tests that share a GPU use Gloo or
//    MPI through staging (staging.h).
// Built with MEGASCALE_WITH_NCCL (CUDA and Gloo on, libnccl found); init_world names the option
// otherwise, and require_device's error when no GPU opens.
#pragma once
#include <memory>

#include "comm/comm_env.h"       // CommEnv
#include "comm/communicator.h"  // Communicator

namespace ms {

std::unique_ptr<Communicator> make_nccl_world(const CommEnv& env);

}  // namespace ms
