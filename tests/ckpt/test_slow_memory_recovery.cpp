// test_slow_memory_recovery: the in-memory recovery's harder faults (memory_runs.h: dp = 4 on 2
// emulated hosts x 2 ranks, snapshots every step). Each ends in a verified older copy or in storage,
// never in a wrong state: the job finishes with every execution of every step bit-identical to the
// uninterrupted run, and nothing is left behind.
//  - a rank killed while copying its state into its snapshot (ckpt:point=mem_copy): its copy of that
//    step is incomplete, so every rank goes back to the step before (their other slot);
//  - a rank killed while sending its replica (mem_send): its own copy is complete; the holder's
//    half-received replica is never used;
//  - every replica a lost host's rank has corrupted (mem_flip at its holder on every save): no copy
//    of that rank's state survives in memory, so the world restores from storage (the reason logged);
//  - a host lost together with the host holding its replicas (both training hosts of 4, 2 spares):
//    storage;
//  - two faults in a row (a rank killed, then another in the next attempt): two recoveries from memory;
//  - a rank killed while a replication round is held up (ckpt:point=slow_send, 3 s, as a slow link
//    would): the steps since that round's start took local snapshots, so the world restores from
//    the newest of them, not from the round's step (at most one step repeated).
#include "ckpt/memory_runs.h"

namespace {

using namespace ms::testing;

TEST(SlowMemoryRecovery, KilledDuringTheSnapshotCopyGoesBackToTheStepBefore) {
  DriverJob& job = memory_job();
  memory_baseline();
  // The pauses at steps 5 and 6 let steps 5's and 6's saves start (a save starts only where none is
  // in flight anywhere); step 6's is killed.
  const DriverRun r = job.run("copy", "localhost*2", 2,
                              {{"MEGASCALE_FAULT", "sleep:rank=0:step=5:seconds=1;sleep:rank=0:step=6:seconds=1;"
                                                   "ckpt:point=mem_copy:rank=2:step=6"}},
                              {}, kMemoryEveryStep);
  ASSERT_FALSE(r.of("fault_injected").empty()) << r.output;
  expect_memory_recovered(job, "copy", r, {"memory"}, 2);
  EXPECT_EQ(r.of("recovery").at(0).value("step", 0), 5) << "rank 2's step-6 copy is incomplete";
}

TEST(SlowMemoryRecovery, KilledDuringTheReplicaTransferUsesTheCompleteOwnCopies) {
  DriverJob& job = memory_job();
  memory_baseline();
  const DriverRun r = job.run("send", "localhost*2", 2,
                              {{"MEGASCALE_FAULT", "sleep:rank=0:step=5:seconds=1;sleep:rank=0:step=6:seconds=1;"
                                                   "ckpt:point=mem_send:rank=2:step=6"}},
                              {}, kMemoryEveryStep);
  ASSERT_FALSE(r.of("fault_injected").empty()) << r.output;
  expect_memory_recovered(job, "send", r, {"memory"}, 2);
  const auto rec = r.of("recovery").at(0);
  EXPECT_EQ(rec.value("memory_local", 0), 4) << rec.dump();
  EXPECT_GE(rec.value("step", 0), 5) << rec.dump();
}

TEST(SlowMemoryRecovery, EveryReplicaOfALostRankCorruptedRestoresFromStorage) {
  DriverJob& job = memory_job();
  memory_baseline();
  // Rank 0 holds rank 2's replicas; every one it completes gets a flipped byte.
  Proc p = job.start("flipall", "localhost*3", 2,
                     {{"MEGASCALE_FAULT", "sleep:rank=0:step=11:seconds=3;ckpt:point=mem_flip:rank=0"}},
                     {"--spare-hosts", "1"}, kMemoryEveryStep);
  ASSERT_TRUE(wait_for_step(job, "flipall", 10));
  ASSERT_TRUE(wait_for_published(job, "flipall", 8));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  kill_host(job, "flipall", 1);
  const DriverRun r = job.finish("flipall", p, 240);
  expect_memory_recovered(job, "flipall", r, {"storage"}, 2 * DriverJob::kEvery);
  const auto rec = r.of("recovery").at(0);
  EXPECT_EQ(rec.value("step", 0), 8) << "the newest checkpoint on storage: " << rec.dump();
  EXPECT_NE(rec.value("memory_skipped", "").find("rank 2's state"), std::string::npos) << rec.dump();
}

TEST(SlowMemoryRecovery, AHostLostWithItsReplicasHostRestoresFromStorage) {
  DriverJob& job = memory_job();
  memory_baseline();
  Proc p = job.start("both", "localhost*4", 2, {{"MEGASCALE_FAULT", "sleep:rank=0:step=11:seconds=3"}},
                     {"--spare-hosts", "2"}, kMemoryEveryStep);
  ASSERT_TRUE(wait_for_step(job, "both", 10));
  ASSERT_TRUE(wait_for_published(job, "both", 8));
  kill_host(job, "both", 0);
  kill_host(job, "both", 1);
  const DriverRun r = job.finish("both", p, 240);
  expect_memory_recovered(job, "both", r, {"storage"}, 2 * DriverJob::kEvery);
  EXPECT_EQ(r.of("recovery").at(0).value("step", 0), 8) << r.of("recovery").at(0).dump();
  EXPECT_EQ(r.of("attempt_start").at(1)["hosts"], nlohmann::json::array({2, 3}));
}

TEST(SlowMemoryRecovery, TwoFaultsInARowBothRecoverFromMemory) {
  DriverJob& job = memory_job();
  memory_baseline();
  // Each crash follows two 1 s pauses that let the two steps before it be saved (a save starts only
  // where none is in flight): at most the step whose copy is still running is repeated.
  const DriverRun r = job.run("twice", "localhost*2", 2,
                              {{"MEGASCALE_FAULT", "sleep:rank=0:step=4:seconds=1;sleep:rank=0:step=5:seconds=1;"
                                                   "crash:rank=2:step=6:seg=forward;"
                                                   "sleep:rank=0:step=10:seconds=1:attempt=1;"
                                                   "sleep:rank=0:step=11:seconds=1:attempt=1;"
                                                   "crash:rank=1:step=12:seg=backward:attempt=1"}},
                              {}, kMemoryEveryStep);
  expect_memory_recovered(job, "twice", r, {"memory", "memory"}, 1);
  EXPECT_EQ(r.summary.value("restarts", 0), 2);
}

TEST(SlowMemoryRecovery, ARoundHeldUpLeavesLocalSnapshotsAndAKilledRankLosesAtMostAStep) {
  DriverJob& job = memory_job();
  memory_baseline();
  // Round 4 is held 3 s on rank 0 (so on every rank: they exchange with it); steps 5.. take local
  // snapshots meanwhile. Rank 2 pauses 1 s at the start of step 9 (its step-8 snapshot completes)
  // and is killed in its forward, while the round is still in flight.
  const DriverRun r = job.run("local", "localhost*2", 2,
                              {{"MEGASCALE_FAULT", "sleep:rank=0:step=4:seconds=1;ckpt:point=slow_send:rank=0:step=4;"
                                                   "sleep:rank=2:step=9:seconds=1;crash:rank=2:step=9:seg=forward"}},
                              {}, kMemoryEveryStep);
  expect_memory_recovered(job, "local", r, {"memory"}, 1);
  const auto rec = r.of("recovery").at(0);
  EXPECT_EQ(rec.value("memory_local", 0), 4) << rec.dump();
  // Step 8's local snapshot, or step 7's where 8's was skipped on a rank (its worker still hashing
  // 7's). No round can have finished since step 4's: it is held 3 s, steps 5-9 take ~1.5 s (the
  // pause at 9 included); without local snapshots the newest copy every rank has would be round 4's.
  EXPECT_GE(rec.value("step", 0), 7) << rec.dump();
}

}  // namespace
