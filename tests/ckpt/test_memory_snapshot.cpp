// test_memory_snapshot: the pieces of in-memory checkpoints that need no process group.
//  - replica_destinations against its closed form (the rank at the same position on each of the
//    next hosts) and, on random host maps, the property it exists for: no replica on its owner's host
//    and no two replicas of one rank on the same host (one host's loss never takes every copy).
//  - snapshot files: a complete snapshot checks clean and reopens with its header; every way a file
//    can be wrong is named (incomplete, another layout, a flipped payload byte against xxHash's own
//    XXH64, a truncated file, not a snapshot); create() keeps a same-size file (a restarted rank's
//    host still holds its state) and starts over on another size.
//  - choose_memory_copies: the newest step every rank has, own copies before peers, the lowest
//    holder next, bad copies and stale layouts excluded, never older than storage.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include <xxhash.h>

#include "ckpt/memory_checkpointer.h"
#include "ckpt/memory_choice.h"
#include "ckpt/memory_restore.h"
#include "ckpt/memory_snapshot.h"
#include "common/test_util.h"

namespace {

using namespace ms;
namespace fs = std::filesystem;

TEST(MemoryReplicas, ClosedFormPlacement) {
  const std::vector<int> two_by_two = {0, 0, 1, 1};
  EXPECT_EQ(replica_destinations(two_by_two, 0, 1), std::vector<int>({2}));
  EXPECT_EQ(replica_destinations(two_by_two, 1, 1), std::vector<int>({3}));
  EXPECT_EQ(replica_destinations(two_by_two, 2, 1), std::vector<int>({0}));
  EXPECT_EQ(replica_destinations(two_by_two, 3, 1), std::vector<int>({1}));
  EXPECT_EQ(replica_destinations(two_by_two, 0, 3), std::vector<int>({2})) << "at most hosts - 1 replicas";
  EXPECT_TRUE(replica_destinations({0, 0, 0}, 1, 2).empty()) << "one host: nowhere else to go";
  // Uneven hosts: 3 ranks, 1 rank, 2 ranks; position modulo the host's count.
  const std::vector<int> uneven = {0, 0, 0, 1, 2, 2};
  EXPECT_EQ(replica_destinations(uneven, 2, 2), std::vector<int>({3, 4}));
  EXPECT_EQ(replica_destinations(uneven, 1, 2), std::vector<int>({3, 5}));
  EXPECT_EQ(replica_destinations(uneven, 3, 2), std::vector<int>({4, 0}));
  EXPECT_EQ(replica_destinations(uneven, 5, 1), std::vector<int>({1}));
  // Hosts ordered by their lowest rank, not by index: host 7 comes first.
  EXPECT_EQ(replica_destinations({7, 7, 3, 3}, 0, 1), std::vector<int>({2}));
  EXPECT_EQ(replica_destinations({7, 7, 3, 3}, 3, 1), std::vector<int>({1}));
}

TEST(MemoryReplicas, NoHostHoldsTwoCopiesOfOneRank) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; trial++) {
    const int world = 1 + static_cast<int>(rng() % 24), hosts = 1 + static_cast<int>(rng() % 6);
    std::vector<int> host_of(static_cast<size_t>(world));
    for (int& h : host_of) h = static_cast<int>(rng() % hosts);
    const int distinct = static_cast<int>(std::set<int>(host_of.begin(), host_of.end()).size());
    const int replicas = 1 + static_cast<int>(rng() % 3);
    for (int r = 0; r < world; r++) {
      const std::vector<int> d = replica_destinations(host_of, r, replicas);
      EXPECT_EQ(static_cast<int>(d.size()), std::min(replicas, distinct - 1));
      std::set<int> seen = {host_of[r]};
      for (int x : d) EXPECT_TRUE(seen.insert(host_of[x]).second) << "trial " << trial << " rank " << r;
    }
  }
}

class SnapshotFiles : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = ms::testing::make_temp_dir("memsnap"); }
  void TearDown() override { fs::remove_all(dir_); }
  // A complete snapshot of `bytes` payload bytes (a counting pattern), layout 42, step 9.
  std::string write_one(size_t bytes) {
    const std::string path = dir_ + "/" + own_snapshot_name(3, 1);
    SnapshotFile f = SnapshotFile::create(path, bytes);
    f.begin_write();
    for (size_t i = 0; i < bytes; i++) f.payload()[i] = static_cast<uint8_t>(i * 7 + 1);
    SnapshotHeader h{};
    h.layout = 42, h.rank = 3, h.world = 4, h.step = 9, h.data_epoch = 1, h.data_index = 17, h.tokens = 1234;
    h.loss = 2.5f, h.payload_bytes = bytes;
    f.complete(h);
    return path;
  }
  std::string dir_;
};

TEST_F(SnapshotFiles, CompleteSnapshotChecksCleanAndReopens) {
  const std::string path = write_one(10000);
  const std::optional<SnapshotFile> f = SnapshotFile::open(path);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(check_snapshot(*f, 42), "");
  const SnapshotHeader& h = f->header();
  EXPECT_EQ(h.rank, 3);
  EXPECT_EQ(h.step, 9);
  EXPECT_EQ(h.data_index, 17u);
  EXPECT_EQ(h.tokens, 1234u);
  EXPECT_EQ(h.loss, 2.5f);
  EXPECT_EQ(h.payload_bytes, 10000u);
  EXPECT_EQ(h.payload_xxh64, XXH64(f->payload(), 10000, 0)) << "the recorded hash is xxHash's";
  EXPECT_EQ(f->payload()[5], static_cast<uint8_t>(36));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->payload()) % 4096, 0u) << "payload page-aligned";
  EXPECT_FALSE(SnapshotFile::open(dir_ + "/absent.snap").has_value());
  EXPECT_TRUE(memory_copies_present(dir_, 3));
  EXPECT_FALSE(memory_copies_present(dir_, 2));
  EXPECT_FALSE(memory_copies_present(dir_ + "/none", 3));
}

TEST_F(SnapshotFiles, EveryWrongSnapshotIsNamed) {
  const std::string path = write_one(10000);
  {
    std::optional<SnapshotFile> f = SnapshotFile::open(path);
    EXPECT_NE(check_snapshot(*f, 43).find("another job's or layout's snapshot"), std::string::npos);
  }
  ms::testing::flip_byte(path, kSnapshotHeaderBytes + 5000, 0x40);
  {
    std::optional<SnapshotFile> f = SnapshotFile::open(path);
    EXPECT_NE(check_snapshot(*f, 42).find("XXH64 is not the one recorded (corrupted)"), std::string::npos);
    EXPECT_EQ(check_snapshot(*f, 42, false), "") << "without the hash the header alone looks fine";
    f->begin_write();  // a writer that stopped midway
    EXPECT_NE(check_snapshot(*f, 42).find("incomplete"), std::string::npos);
  }
  write_one(10000);  // create() keeps the same-size file; rewritten whole
  fs::resize_file(path, kSnapshotHeaderBytes + 100);
  {
    std::optional<SnapshotFile> f = SnapshotFile::open(path);
    EXPECT_NE(check_snapshot(*f, 42).find("says 10000 payload bytes, the file holds 100"), std::string::npos);
  }
  ms::testing::spit(path, "hello");
  {
    std::optional<SnapshotFile> f = SnapshotFile::open(path);
    ASSERT_TRUE(f.has_value());
    EXPECT_NE(check_snapshot(*f, 42).find("too short to be a snapshot"), std::string::npos);
  }
  ms::testing::spit(path, std::string(8192, 'x'));
  {
    std::optional<SnapshotFile> f = SnapshotFile::open(path);
    EXPECT_NE(check_snapshot(*f, 42).find("not a version-1 megascale snapshot"), std::string::npos);
  }
}

TEST_F(SnapshotFiles, CreateKeepsASameSizeFileAndStartsOverOtherwise) {
  const std::string path = write_one(10000);
  {
    SnapshotFile again = SnapshotFile::create(path, 10000);  // a restarted rank opening its slot
    EXPECT_EQ(check_snapshot(again, 42), "") << "the state its host held is still there";
  }
  {
    SnapshotFile other = SnapshotFile::create(path, 20000);
    EXPECT_EQ(other.payload_capacity(), 20000u);
    EXPECT_NE(check_snapshot(other, 42), "");
  }
}

MemoryCopy copy(int owner, int holder, int step, int slot, uint64_t layout) { return {owner, holder, step, slot, layout}; }

TEST(MemoryChoice, NewestCommonStepOwnCopiesFirst) {
  // 2 ranks (layouts 10, 11). Rank 0 has steps 6 and 7 of its own; rank 1 lost its host: its
  // replicas of steps 6 and 7 are held by rank 0. Storage's newest step is 4.
  const std::vector<MemoryCopy> copies = {copy(0, 0, 6, 0, 10), copy(0, 0, 7, 1, 10), copy(1, 0, 6, 0, 11),
                                          copy(1, 0, 7, 1, 11)};
  std::string why;
  auto c = choose_memory_copies(copies, {10, 11}, 4, {}, why);
  ASSERT_TRUE(c.has_value()) << why;
  EXPECT_EQ(c->step, 7);
  EXPECT_TRUE(same_copy(c->use[0], copies[1]));
  EXPECT_TRUE(same_copy(c->use[1], copies[3]));
  // Rank 1 also has its own step-7 copy: it is preferred over the peer's.
  std::vector<MemoryCopy> more = copies;
  more.push_back(copy(1, 1, 7, 0, 11));
  c = choose_memory_copies(more, {10, 11}, 4, {}, why);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->use[1].holder, 1);
  // Two peers: the lowest holder.
  const std::vector<MemoryCopy> peers = {copy(0, 0, 3, 0, 5), copy(1, 2, 3, 0, 6), copy(1, 0, 3, 1, 6),
                                         copy(2, 2, 3, 0, 7)};
  c = choose_memory_copies(peers, {5, 6, 7}, -1, {}, why);
  ASSERT_TRUE(c.has_value()) << why;
  EXPECT_EQ(c->use[1].holder, 0);
}

TEST(MemoryChoice, BadCopiesStaleLayoutsAndStorageDecide) {
  const std::vector<MemoryCopy> copies = {copy(0, 0, 6, 0, 10), copy(0, 0, 7, 1, 10), copy(1, 0, 6, 0, 11),
                                          copy(1, 0, 7, 1, 11)};
  std::string why;
  // Rank 1's step-7 copy failed its hash: step 6 for everyone.
  auto c = choose_memory_copies(copies, {10, 11}, 4, {copies[3]}, why);
  ASSERT_TRUE(c.has_value()) << why;
  EXPECT_EQ(c->step, 6);
  EXPECT_TRUE(same_copy(c->use[0], copies[0])) << "rank 0 goes back to step 6 too";
  // Both of rank 1's copies bad: nothing in memory.
  c = choose_memory_copies(copies, {10, 11}, 4, {copies[2], copies[3]}, why);
  EXPECT_FALSE(c.has_value());
  EXPECT_NE(why.find("rank 1's state"), std::string::npos) << why;
  // Storage is newer than memory: storage.
  c = choose_memory_copies(copies, {10, 11}, 8, {}, why);
  EXPECT_FALSE(c.has_value());
  EXPECT_NE(why.find("older than the newest checkpoint on storage (8)"), std::string::npos) << why;
  // Equal to storage: memory (no files to read).
  c = choose_memory_copies(copies, {10, 11}, 7, {}, why);
  ASSERT_TRUE(c.has_value());
  // Rank 1's layout changed (another dp degree): its copies do not count.
  c = choose_memory_copies(copies, {10, 99}, -1, {}, why);
  EXPECT_FALSE(c.has_value());
  // A world larger than the copies: the new rank has none.
  c = choose_memory_copies(copies, {10, 11, 12}, -1, {}, why);
  EXPECT_FALSE(c.has_value());
  EXPECT_NE(why.find("rank 2's state"), std::string::npos) << why;
  // Disjoint steps: no common step.
  c = choose_memory_copies({copy(0, 0, 5, 0, 10), copy(1, 1, 6, 0, 11)}, {10, 11}, -1, {}, why);
  EXPECT_FALSE(c.has_value());
}

}  // namespace
