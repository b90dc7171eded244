// test_shared_batches: the per-machine data loader (data/shared_batches.h). In one process: every
// data-parallel slice equals DataLoader with set_dp_slice, across epoch boundaries. With forked
// "local ranks" (rank 0 hosts the producer; one rank needs no tokens): the same batches on every
// consumer, the files read once per machine (the producer's count, not once per rank); a stalled or
// killed producer named within the timeout, also a local rank 0 killed inside the attach window and
// one whose files are bad (every rank gets the reason); nothing left in /dev/shm afterwards, also
// after a SIGKILLed or SIGTERMed rank, and after a training rank stopped by the driver (SIGUSR1,
// which ends it with _Exit) inside the attach window; a planted stale segment replaced; a resumed
// feed starts at the loader's position.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/processes.h"
#include "common/test_util.h"
#include "data/dataloader.h"
#include "data/shared_batches.h"
#include "data/token_shard.h"

using namespace ms;

namespace {

constexpr int kB = 2, kT = 8, kV = 300;

class SharedBatches : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_shm"; }
  void SetUp() override {
    TempDirTest::SetUp();
    std::vector<uint16_t> t(1000);  // 124 samples of 8: several epochs in a test
    for (size_t i = 0; i < t.size(); i++) t[i] = static_cast<uint16_t>((i * 7 + 3) % kV);
    write_token_shard(path("train.bin"), t);
  }
  MachineFeedOptions options(int dp, int dp_rank, int local_rank, int local_world, const std::string& job) const {
    MachineFeedOptions o;
    o.paths = {path("train.bin")};
    o.B = kB, o.T = kT, o.vocab_size = kV, o.seed = 11, o.shuffle = true;
    o.dp = dp, o.dp_rank = dp_rank, o.local_rank = local_rank, o.local_world_size = local_world;
    o.job_key = dir_.string() + job;
    o.timeout_s = 2;
    return o;
  }
  // Whether DataLoader's slice dp_rank of dp gives the same n micro-batches as next(in, tg).
  bool same_as_loader(int dp, int dp_rank, int n, const std::function<void(int*, int*)>& next) const {
    DataLoader ref({path("train.bin")}, kB, kT, kV, 11, true, "ref", false);
    ref.set_dp_slice(dp_rank, dp);
    std::vector<int> a(kB * kT), b(kB * kT), c(kB * kT), d(kB * kT);
    for (int i = 0; i < n; i++) {
      ref.next_batch(a.data(), b.data());
      next(c.data(), d.data());
      if (a != c || b != d) return false;
    }
    return true;
  }
  static std::string shm_path(const MachineBatchFeed& f) { return "/dev/shm" + f.segment(); }
};

int child(const std::function<int()>& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
    return 3;
  }
}

pid_t fork_child(const std::function<int()>& fn) {
  const pid_t p = fork();
  if (p == 0) _exit(child(fn));
  return p;
}

int wait_code(pid_t p) {
  int st = 0;
  waitpid(p, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

TEST_F(SharedBatches, EverySliceEqualsTheDataLoaderAcrossEpochs) {
  for (int r = 0; r < 3; r++) {
    MachineBatchFeed f(options(3, r, 0, 1, "single" + std::to_string(r)));
    EXPECT_EQ(f.num_samples(), 124u);
    // 124 samples / (3 x 2) per micro-batch: epochs roll over inside the 50 micro-batches.
    EXPECT_TRUE(same_as_loader(3, r, 50, [&](int* i, int* t) { f.next_batch(i, t); })) << "dp rank " << r;
    EXPECT_EQ(f.position(), (DataLoader::Position{2, 50 * 6 - 2 * 124})) << "position after 50 micro-batches";
    EXPECT_FALSE(std::filesystem::exists(shm_path(f))) << "the name must be gone once attached";
  }
}

TEST_F(SharedBatches, AResumedFeedStartsAtTheLoadersPosition) {
  const DataLoader::Position start{1, 119};  // the first micro-batch straddles epochs 1 and 2
  MachineFeedOptions o = options(2, 1, 0, 1, "resume");
  o.start = start;
  MachineBatchFeed f(o);
  DataLoader ref({path("train.bin")}, kB, kT, kV, 11, true, "ref", false);
  ref.set_dp_slice(1, 2);
  ref.set_position(start);
  std::vector<int> a(kB * kT), b(kB * kT), c(kB * kT), d(kB * kT);
  for (int i = 0; i < 40; i++) {
    ASSERT_EQ(f.position(), ref.position()) << "micro-batch " << i;
    ref.next_batch(a.data(), b.data());
    f.next_batch(c.data(), d.data());
    ASSERT_TRUE(a == c && b == d) << "micro-batch " << i;
  }
}

TEST_F(SharedBatches, ForkedRanksReadOnceAndLeaveNothingBehind) {
  // Plant a stale segment under the job's name (an earlier crash): it must be replaced.
  const std::string job = "forked";
  const std::string planted = "/dev/shm" + MachineBatchFeed::segment_name(dir_.string() + job);
  std::ofstream(planted) << "garbage from an earlier crash";
  ASSERT_TRUE(std::filesystem::exists(planted));
  const int n = 20, ring = 4;
  std::vector<pid_t> kids;
  for (int r = 0; r < 3; r++)
    kids.push_back(fork_child([&, r] {
      const bool needs = r < 2;  // local rank 2: a middle pipeline stage
      MachineFeedOptions o = options(2, needs ? r : 0, r, 3, job);
      o.needs_tokens = needs;
      o.ring_slots = ring;
      MachineBatchFeed f(o);
      if (!needs) return 0;
      if (!same_as_loader(2, r, n, [&](int* i, int* t) { f.next_batch(i, t); })) return 1;
      if (r != 0) return 0;
      // Local rank 0 hosts the producer: once both readers have read n micro-batches it runs
      // exactly `ring` ahead and stops there (it never overwrites an unread slot).
      for (int i = 0; i < 500 && f.produced() < n + ring; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (f.produced() != n + ring) return 2;
      // The files were read once per machine: dp x B samples per micro-batch, not once per rank.
      if (f.samples_read() != static_cast<uint64_t>(n + ring) * 2 * kB) return 4;
      return 0;
    }));
  for (int r = 0; r < 3; r++) EXPECT_EQ(wait_code(kids[r]), 0) << "local rank " << r;
  EXPECT_FALSE(std::filesystem::exists(planted)) << "segment left in /dev/shm";
}

TEST_F(SharedBatches, AStalledOrDeadProducerIsNamedWithinTheTimeout) {
  // Local rank 0 of two: its producer makes `stall_after` micro-batches, then nothing; it sleeps.
  auto stalling_producer = [&](const std::string& job, uint64_t stall_after, int sleep_s) {
    return fork_child([=, this] {
      MachineFeedOptions o = options(1, 0, 0, 2, job);
      o.stall_after = stall_after;
      MachineBatchFeed f(o);
      std::this_thread::sleep_for(std::chrono::seconds(sleep_s));
      return 0;
    });
  };
  // Stalled: the producer stops after 3 micro-batches; local rank 1 must fail on the 4th.
  {
    pid_t p0 = stalling_producer("stall", 3, 5);
    pid_t p1 = fork_child([&] {
      MachineFeedOptions o = options(1, 0, 1, 2, "stall");
      MachineBatchFeed f(o);
      std::vector<int> in(kB * kT), tg(kB * kT);
      for (int i = 0; i < 3; i++) f.next_batch(in.data(), tg.data());
      const auto t0 = std::chrono::steady_clock::now();
      try {
        f.next_batch(in.data(), tg.data());
      } catch (const Error& e) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::string w = e.what();
        return w.find("data loader") != std::string::npos && w.find("stalled") != std::string::npos && s < 4 ? 0 : 5;
      }
      return 6;
    });
    EXPECT_EQ(wait_code(p1), 0);
    kill(p0, SIGKILL);
    wait_code(p0);
  }
  // Dead: the producer's process is SIGKILLed after attaching; the consumer names it at once.
  {
    pid_t p0 = stalling_producer("dead", 1, 30);
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    pid_t p1 = fork_child([&] {
      close(pipefd[0]);
      MachineBatchFeed f(options(1, 0, 1, 2, "dead"));
      std::vector<int> in(kB * kT), tg(kB * kT);
      f.next_batch(in.data(), tg.data());
      if (write(pipefd[1], "x", 1) != 1) return 7;
      try {
        f.next_batch(in.data(), tg.data());
      } catch (const Error& e) {
        const std::string w = e.what();
        return w.find("data loader") != std::string::npos && w.find("gone") != std::string::npos ? 0 : 5;
      }
      return 6;
    });
    close(pipefd[1]);
    char c;
    ASSERT_EQ(read(pipefd[0], &c, 1), 1);
    close(pipefd[0]);
    kill(p0, SIGKILL);
    EXPECT_EQ(wait_code(p1), 0) << "the producer's process, killed but not yet reaped, counts as gone";
    EXPECT_EQ(wait_code(p0), 100 + SIGKILL);
    EXPECT_FALSE(std::filesystem::exists("/dev/shm" + MachineBatchFeed::segment_name(dir_.string() + "dead")));
  }
  // A rank SIGTERMed while the others have not attached yet (the attach window): the handler
  // removes the name.
  {
    MachineFeedOptions o = options(1, 0, 0, 2, "term");
    o.timeout_s = 30;
    const std::string seg = "/dev/shm" + MachineBatchFeed::segment_name(o.job_key);
    pid_t p0 = fork_child([&] {
      MachineBatchFeed f(o);  // waits for local rank 1, which never comes
      return 0;
    });
    for (int i = 0; i < 500 && !std::filesystem::exists(seg); i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(std::filesystem::exists(seg));
    kill(p0, SIGTERM);
    EXPECT_EQ(wait_code(p0), 100 + SIGTERM);
    EXPECT_FALSE(std::filesystem::exists(seg)) << "SIGTERM left the segment behind";
  }
}

TEST_F(SharedBatches, LocalRankZeroKilledWhileOthersAttachIsNamedAndCleanedUp) {
  // Three local ranks, the third never comes: local rank 0 is SIGKILLed inside the attach window
  // (its signal handler cannot run); local rank 1 notices, names it and removes the name.
  const std::string job = "attach-kill";
  const std::string seg = MachineBatchFeed::segment_name(dir_.string() + job);
  auto rank = [&](int r) {
    return fork_child([=, this] {
      MachineFeedOptions o = options(1, 0, r, 3, job);
      o.timeout_s = 30;
      try {
        MachineBatchFeed f(o);
      } catch (const Error& e) {
        const std::string w = e.what();
        const bool named = w.find("gone before every local rank attached") != std::string::npos;
        return named && w.find(seg) != std::string::npos ? 0 : 5;
      }
      return 6;
    });
  };
  const pid_t p0 = rank(0), p1 = rank(1);
  for (int i = 0; i < 1000 && MachineBatchFeed::attached_ranks(seg) < 2; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(MachineBatchFeed::attached_ranks(seg), 2);
  const auto t0 = std::chrono::steady_clock::now();
  kill(p0, SIGKILL);
  EXPECT_EQ(wait_code(p1), 0);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_EQ(wait_code(p0), 100 + SIGKILL);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + seg)) << "segment left in /dev/shm";
}

TEST_F(SharedBatches, EveryRankGetsTheReasonWhenTheFilesAreBadOrTheShapesDiffer) {
  // Local rank 0 cannot open its data: local rank 1 fails at once with the same reason (the file).
  std::vector<uint16_t> t(100, 1);
  t[57] = kV + 5;
  write_token_shard(path("bad.bin"), t);
  std::vector<pid_t> kids;
  for (int r = 0; r < 2; r++)
    kids.push_back(fork_child([&, r] {
      MachineFeedOptions o = options(1, 0, r, 2, "bad");
      o.paths = {path("bad.bin")};
      o.timeout_s = 20;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        MachineBatchFeed f(o);
      } catch (const Error& e) {
        const std::string w = e.what();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return w.find("bad.bin") != std::string::npos && s < 10 ? 0 : 5;
      }
      return 6;
    }));
  for (int r = 0; r < 2; r++) EXPECT_EQ(wait_code(kids[r]), 0) << "local rank " << r;
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + MachineBatchFeed::segment_name(dir_.string() + "bad")));
  // A rank asking for another shape is refused by name, and nobody waits for it.
  kids.clear();
  for (int r = 0; r < 2; r++)
    kids.push_back(fork_child([&, r] {
      MachineFeedOptions o = options(1, 0, r, 2, "shape");
      if (r == 1) o.B = kB + 1;
      try {
        MachineBatchFeed f(o);
        return r == 0 ? 0 : 6;
      } catch (const Error& e) {
        return r == 1 && std::string(e.what()).find("B 2 T 8") != std::string::npos ? 0 : 5;
      }
    }));
  for (int r = 0; r < 2; r++) EXPECT_EQ(wait_code(kids[r]), 0) << "local rank " << r;
}

}  // namespace

namespace {

std::set<std::string> data_segments() {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("megascale-data-", 0) == 0) names.insert(e.path().filename().string());
  return names;
}

}  // namespace

TEST_F(SharedBatches, ATrainingRankStoppedByTheDriverInTheAttachWindowLeavesNothing) {
  // `megascale train` told it has a second local rank that never comes: it waits in the attach
  // window with its segment in /dev/shm; the driver's recovery stop (SIGUSR1) ends it with _Exit,
  // which runs no destructor: the name must still go.
  std::ofstream(path("cfg.toml")) << "[model]\nn_layer = 1\nn_head = 2\nn_embd = 32\nvocab_size = 300\n"
                                     "max_seq_len = 8\n[train]\nsteps = 2\nbatch_size = 2\nseq_len = 8\n"
                                     "eval_every = 0\nsample_tokens = 0\nthreads = 1\nout_dir = \""
                                  << path("run") << "\"\n[data]\ntrain = \"" << path("train.bin")
                                  << "\"\nval = \"\"\nloader_timeout_s = 120\n";
  const std::set<std::string> before = data_segments();
  const auto start = ms::testing::Clock::now();
  ms::testing::Proc p = ms::testing::spawn({MEGASCALE_BINARY, "train", path("cfg.toml")},
                                           {{"LOCAL_WORLD_SIZE", "2"}}, path("train.out"));
  std::string seg;
  ms::testing::wait_all({&p}, start, 60, [&] {
    for (const auto& n : data_segments())
      if (!before.count(n)) seg = n;
    return !seg.empty();
  });
  ASSERT_FALSE(seg.empty()) << "no segment appeared: " << p.output();
  ASSERT_FALSE(p.done) << p.output();
  ::kill(p.pid, SIGUSR1);
  ms::testing::wait_all({&p}, start, 60);
  EXPECT_EQ(p.code, 128 + SIGUSR1) << p.output();
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + seg)) << "SIGUSR1 left " << seg << " behind";
}
