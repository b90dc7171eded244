// test_comm_streams: every communicator has its own progress (queue + thread, comm/comm_thread.h),
// so groups are independent streams. In-process: a test backend whose ops block on a gate shows
// that each group runs on its own thread, that a blocked group does not hold up another, that
// run_on_comm_thread runs on this group's thread after its queued ops, and that threads start on
// the first op and end with their group. Multi-process (tests/tools/comm_check on two real ranks:
// `megascale launch --nproc 2` for Gloo, `mpirun -np 2` for MPI): two groups with the same members
// get collectives started in opposite orders on the two ranks, which deadlocked (until the 5 s op
// deadline) while one FIFO thread per process ran every group; and several groups driven by their
// own caller threads at once, results against closed forms, leaked groups joined at exit.
#include <dirent.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/world.h"
#include "common/test_util.h"

namespace ms {
namespace {

using ms::testing::run_cmd;
using std::chrono::milliseconds;

const std::string kWorker = std::string(MEGASCALE_TOOLS_DIR) + "/comm_check";

// A one-rank test backend: each op records the thread it ran on and, when the test asks for it,
// waits (at most 5 s, then fails the op) until another op opens its gate.
class GateCommunicator final : public Communicator {
 public:
  explicit GateCommunicator(std::string name) { set_identity(std::move(name), 0, {0}, milliseconds(5000)); }
  ~GateCommunicator() override { drain(); }

  std::unique_ptr<Communicator> make_group(const std::vector<int>&, const std::string& name) override {
    return std::make_unique<GateCommunicator>(name);
  }

  void hold_next_op() { hold_ = true; }  // the next op waits for open()
  void open() {
    std::lock_guard lk(m_);
    open_ = true;
    cv_.notify_all();
  }
  // Thread of every op run so far, in run order.
  std::vector<std::thread::id> threads() {
    std::lock_guard lk(m_);
    return threads_;
  }
  using Communicator::run_on_comm_thread;
  std::function<void()> on_execute;  // called by the next ops, before the gate

 protected:
  const char* backend_name() const override { return "gate"; }
  void execute(Op&) override {
    {
      std::lock_guard lk(m_);
      threads_.push_back(std::this_thread::get_id());
    }
    if (on_execute) on_execute();
    if (hold_.exchange(false)) {
      std::unique_lock lk(m_);
      if (!cv_.wait_for(lk, std::chrono::seconds(5), [&] { return open_; }))
        throw std::runtime_error("gate not opened within 5 s");
    }
  }

 private:
  std::atomic<bool> hold_{false};
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
  std::vector<std::thread::id> threads_;
};

// Threads of this process named "comm ..." (comm_thread.cpp names them so; other runtimes, e.g.
// ThreadSanitizer's, start threads of their own).
int thread_count() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string name = ms::testing::slurp(std::string("/proc/self/task/") + e->d_name + "/comm");
      n += name.rfind("comm ", 0) == 0;
    }
    closedir(d);
  }
  return n;
}

TEST(CommStreamsTest, EachGroupRunsOnItsOwnThread) {
  GateCommunicator a("a"), b("b");
  a.barrier();
  a.barrier();
  b.barrier();
  const auto ta = a.threads(), tb = b.threads();
  ASSERT_EQ(ta.size(), 2u);
  ASSERT_EQ(tb.size(), 1u);
  EXPECT_EQ(ta[0], ta[1]) << "ops of one group run on one thread";
  EXPECT_NE(ta[0], tb[0]) << "two groups share a thread";
  EXPECT_NE(ta[0], std::this_thread::get_id());
  EXPECT_NE(tb[0], std::this_thread::get_id());
}

TEST(CommStreamsTest, ABlockedGroupDoesNotHoldUpAnother) {
  // a's op waits until b's op opens it: with one thread for both, a's op would time out (5 s).
  GateCommunicator a("a"), b("b");
  a.hold_next_op();
  b.on_execute = [&] { a.open(); };
  CommWork wa = a.start_barrier();
  CommWork wb = b.start_barrier();
  wb.wait();
  EXPECT_NO_THROW(wa.wait());
}

TEST(CommStreamsTest, OpsOfOneGroupRunInStartOrderAndRunOnCommThreadAfterThem) {
  GateCommunicator a("a");
  std::vector<int> order;
  std::mutex m;
  int next = 0;
  a.on_execute = [&] {
    std::lock_guard lk(m);
    order.push_back(next++);
  };
  a.hold_next_op();  // the first op waits, so the others queue up behind it
  std::vector<CommWork> w;
  for (int i = 0; i < 5; i++) w.push_back(a.start_barrier());
  std::thread opener([&] {
    std::this_thread::sleep_for(milliseconds(50));
    a.open();
  });
  std::thread::id ran_on;
  a.run_on_comm_thread([&] {
    ran_on = std::this_thread::get_id();
    std::lock_guard lk(m);
    order.push_back(100);
  });
  opener.join();
  for (auto& x : w) EXPECT_TRUE(x.done());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 100}));
  EXPECT_EQ(ran_on, a.threads().at(0));
}

TEST(CommStreamsTest, ThreadsStartOnTheFirstOpAndEndWithTheGroup) {
  CommEnv env;
  auto world = init_world(env);  // self backend
  const int before = thread_count();  // 0 unless an earlier test leaked a group
  std::vector<std::unique_ptr<Communicator>> groups;
  for (int i = 0; i < 8; i++) groups.push_back(world->new_group({0}, fmt::format("g{}", i)));
  EXPECT_EQ(thread_count(), before) << "groups that never communicate must not cost a thread";
  std::vector<float> x = {1, 2, 3};
  groups[3]->all_reduce(x.data(), 3, DType::kF32, ReduceOp::kSum);
  groups[5]->all_reduce(x.data(), 3, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(thread_count(), before + 2);
  groups[3].reset();
  EXPECT_EQ(thread_count(), before + 1) << "a destroyed group's thread is joined";
  groups.clear();
  EXPECT_EQ(thread_count(), before);
}

// ---------------------------------------------------------------------------------------------
// Real processes: two ranks, a 5 s op deadline (the old cycle ends in a CommError, not a hang).

std::string gloo_launch(const std::string& args) {
  return "timeout 120 " + std::string(MEGASCALE_BINARY) + " launch --nproc 2 -- " + kWorker + " " + args;
}

std::string mpi_run(const std::string& args) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun --oversubscribe -np 2 " +
         kWorker + " " + args;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) n++;
  return n;
}

// Both ranks exit 0, print `line` and PASS, and report no CommError (the output is shown once).
void expect_both_ranks_pass(const ms::testing::CmdResult& r, const std::string& line) {
  const size_t passes = count(r.output, "PASS"), lines = count(r.output, line), errors = count(r.output, "COMM_ERROR");
  EXPECT_TRUE(r.code == 0 && passes == 2 && lines == 2 && errors == 0)
      << "exit code " << r.code << ", PASS x" << passes << ", '" << line << "' x" << lines << ", COMM_ERROR x" << errors
      << "; output:\n" << r.output;
}

TEST(CommStreamsTest, GlooOppositeStartOrdersDoNotDeadlock) {
  expect_both_ranks_pass(run_cmd(gloo_launch("--mode cross --rounds 20 --timeout-ms 5000")), "cross: 20 rounds");
}

TEST(CommStreamsTest, MpiOppositeStartOrdersDoNotDeadlock) {
  expect_both_ranks_pass(run_cmd(mpi_run("--mode cross --rounds 20 --timeout-ms 5000")), "cross: 20 rounds");
}

TEST(CommStreamsTest, GlooGroupsDrivenFromThreadsAtOnce) {
  expect_both_ranks_pass(run_cmd(gloo_launch("--mode concurrent --groups 4 --rounds 30 --timeout-ms 20000")),
                         "concurrent: 4 groups x 30 rounds");
}

TEST(CommStreamsTest, MpiGroupsDrivenFromThreadsAtOnce) {
  // mpirun fails the job when a rank exits without MPI_Finalize: the leaked groups' threads must
  // be joined and MPI finalised at exit.
  expect_both_ranks_pass(run_cmd(mpi_run("--mode concurrent --groups 4 --rounds 30 --timeout-ms 20000")),
                         "concurrent: 4 groups x 30 rounds");
}

}  // namespace
}  // namespace ms
