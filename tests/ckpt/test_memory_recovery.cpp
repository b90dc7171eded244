// test_memory_recovery: recovery from in-memory checkpoints under the driver (memory_runs.h: dp = 4
// on 2 emulated hosts x 2 ranks, snapshots every step). Each job finishes with every step's loss
// bit-identical to the uninterrupted run, the driver's `recovery` event naming the path, and nothing
// left behind (the memory folders included).
//  - a rank SIGKILLed: its restarted self and the survivors read their own snapshots from their
//    hosts' memory folders (no storage read, at most the step in flight repeated);
//  - a whole host lost (executor and ranks SIGKILLed, its folder gone): the spare's ranks receive
//    their state from the replicas on the surviving host;
//  - the newest replica of a lost host's rank corrupted (one byte flipped after it was verified):
//    the restore's check drops it and the world agrees on the step before (a verified older copy).
// The slower faults (during the snapshot and its transfer, every replica corrupted, a host lost with
// its replica's host, two faults in a row) are in test_slow_memory_recovery.
#include "ckpt/memory_runs.h"

namespace {

using namespace ms::testing;

TEST(MemoryRecovery, KilledRankResumesFromItsHostsMemory) {
  DriverJob& job = memory_job();
  memory_baseline();
  // A save starts at a boundary only where none is in flight anywhere: the pauses at steps 5 and 6
  // let step 5's and step 6's saves start. At the crash step 6's copy may still be running: step 5 or
  // 6 is restored, at most one step runs again.
  const DriverRun r = job.run("rank", "localhost*2", 2,
                              {{"MEGASCALE_FAULT", "sleep:rank=0:step=5:seconds=1;sleep:rank=0:step=6:seconds=1;"
                                                   "crash:rank=2:step=7:seg=forward"}},
                              {}, kMemoryEveryStep);
  expect_memory_recovered(job, "rank", r, {"memory"}, 1);
  const auto rec = r.of("recovery");
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].value("memory_local", 0), 4) << "every rank's host kept its folder: " << rec[0].dump();
  EXPECT_EQ(rec[0].value("bytes_read", -1.0), 0.0) << "nothing read from storage";
  EXPECT_GE(rec[0].value("step", 0), 5) << "step 6 or, its copy still running at the kill, step 5";
}

// dp 2 x pp 2 (tp-dp-pp: each host holds one stage's data-parallel group): every rank of a group and
// every copy it uses sit in one host's folder, so each rank reads its replica peer's weights from
// that file instead of the weights' all-gather; the losses stay the uninterrupted run's, bit for bit.
TEST(MemoryRecovery, AGroupOnOneHostReadsItsPeersWeightsFromTheFolder) {
  DriverJob& job = memory_job();
  const std::vector<std::string> layout = {"--parallel.dp=2", "--parallel.pp=2"};
  std::vector<std::string> memory = layout;
  memory.insert(memory.end(), kMemoryEveryStep.begin(), kMemoryEveryStep.end());
  const DriverRun base = job.run("dppp-base", "localhost*2", 2, {}, {}, layout);
  ASSERT_EQ(base.code, 0) << base.output;
  const DriverRun r = job.run("dppp", "localhost*2", 2,
                              {{"MEGASCALE_FAULT", "sleep:rank=0:step=5:seconds=1;sleep:rank=0:step=6:seconds=1;"
                                                   "crash:rank=3:step=7:seg=forward"}},
                              {}, memory);
  expect_memory_recovered(job, "dppp", r, {"memory"}, 1, &base);
  const auto rec = r.of("recovery");
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].value("memory_local", 0), 4) << rec[0].dump();
  for (int rank = 0; rank < 4; rank++) {
    const std::string f = job.dir() + "/dppp/restore_rank" + std::to_string(rank) + ".json";
    const nlohmann::json j = nlohmann::json::parse(slurp(f), nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << f;
    EXPECT_TRUE(j.value("weights_from_files", false)) << "rank " << rank << ": " << j.dump();
  }
}

TEST(MemoryRecovery, LostHostResumesFromItsPeersReplicas) {
  DriverJob& job = memory_job();
  memory_baseline();
  // The pauses at steps 9 and 10 let steps 9's and 10's saves start (a save starts only where none is
  // in flight); rank 0 then pauses 3 s at step 11 (under the 4 s stall limit) and host 1 is killed
  // a second after step 10 was logged (step 10's replicas done): no step is repeated... unless its
  // replication was slower than a second: then one.
  Proc p = job.start("host", "localhost*3", 2,
                     {{"MEGASCALE_FAULT", "sleep:rank=0:step=9:seconds=1;sleep:rank=0:step=10:seconds=1;"
                                          "sleep:rank=0:step=11:seconds=3"}},
                     {"--spare-hosts", "1"}, kMemoryEveryStep);
  ASSERT_TRUE(wait_for_step(job, "host", 10));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  kill_host(job, "host", 1);
  const DriverRun r = job.finish("host", p, 240);
  expect_memory_recovered(job, "host", r, {"memory"}, 1);
  const auto rec = r.of("recovery");
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].value("memory_local", 0), 2) << rec[0].dump();
  EXPECT_EQ(rec[0].value("memory_peer", 0), 2) << "host 1's ranks from their replicas: " << rec[0].dump();
  EXPECT_GT(rec[0].value("bytes_received", 0.0), 0.0);
  EXPECT_EQ(r.of("attempt_start").at(1)["hosts"], nlohmann::json::array({0, 2}));
}

TEST(MemoryRecovery, CorruptedNewestReplicaFallsBackToAVerifiedOlderStep) {
  DriverJob& job = memory_job();
  memory_baseline();
  // Rank 0 holds rank 2's replicas (the same position on the next host); its copy of step 10 gets a
  // flipped byte right after it was verified. The pauses at steps 9 and 10 let steps 9's and 10's
  // saves start (a save starts only where none is in flight); host 1 dies during the pause at step
  // 11, a second after step 10 was logged (its replication done).
  Proc p = job.start("flip", "localhost*3", 2,
                     {{"MEGASCALE_FAULT", "sleep:rank=0:step=9:seconds=1;sleep:rank=0:step=10:seconds=1;"
                                          "sleep:rank=0:step=11:seconds=3;ckpt:point=mem_flip:rank=0:step=10"}},
                     {"--spare-hosts", "1"}, kMemoryEveryStep);
  ASSERT_TRUE(wait_for_step(job, "flip", 10));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  kill_host(job, "flip", 1);
  const DriverRun r = job.finish("flip", p, 240);
  std::string injected;
  for (const auto& e : r.of("fault_injected")) injected += e.dump() + "\n";
  EXPECT_NE(injected.find("mem_flip"), std::string::npos) << injected << r.output;
  expect_memory_recovered(job, "flip", r, {"memory"}, 2);
  const auto rec = r.of("recovery");
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].value("step", 0), 9) << "step 10's replica failed its check: " << rec[0].dump();
  EXPECT_EQ(rec[0].value("memory_peer", 0), 2) << rec[0].dump();
  EXPECT_NE(slurp(job.dir() + "/flip/log.jsonl").find("2 agreement round(s)"), std::string::npos)
      << "rank 0 reports the second agreement: " << injected << slurp(job.dir() + "/flip/log.jsonl");
}

}  // namespace
