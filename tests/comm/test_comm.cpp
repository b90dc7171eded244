// test_comm: the communication layer. In-process: CommEnv parsing, the self backend, the trace ring
// buffer, store errors. Multi-process: tests/tools/comm_check runs as every rank (gloo: spawned
// here with RANK/WORLD_SIZE and a file or redis store; mpi: under mpirun) and checks every op
// against closed forms; fault tests SIGKILL or SIGSTOP one rank and check what the others report,
// and how fast. Every process started here is waited for or killed before the test ends.
#include <arpa/inet.h>   // inet_pton
#include <netinet/in.h>  // sockaddr_in
#include <signal.h>      // kill
#include <spawn.h>       // posix_spawn
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <map>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "comm/comm_env.h"
#include "comm/communicator.h"
#include "comm/world.h"
#include "obs/record_reader.h"
#include "obs/trace_sink.h"
#include "common/processes.h"
#include "common/test_util.h"

extern char** environ;

namespace ms {
namespace {

using ms::testing::Clock;
using ms::testing::Proc;
using ms::testing::seconds_since;
using ms::testing::spawn;
using ms::testing::wait_all;
using ms::testing::slurp;

const std::string kWorker = std::string(MEGASCALE_TOOLS_DIR) + "/comm_check";

// ---------------------------------------------------------------------------------------------
// Processes

// Kills a process started for us by another program (an mpirun child, a daemonized redis-server)
// by the pid in its pid file, if that pid is still running `program`.
void kill_pid_file(const std::string& path, const std::string& program, int sig = SIGKILL) {
  const std::string s = slurp(path);
  if (s.empty()) return;
  const pid_t pid = std::stoi(s);
  if (pid <= 1 || slurp("/proc/" + std::to_string(pid) + "/cmdline").find(program) == std::string::npos) return;
  if (kill(pid, 0) == 0) {
    kill(pid, sig);
    for (int i = 0; i < 200 && kill(pid, 0) == 0; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

class CommProcTest : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_comm"; }
  // TempDirTest's folder, minus the '/' of parameterized test names (which would nest it).
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = std::filesystem::temp_directory_path() / (std::string(tag()) + "_" + std::to_string(getpid()) + "_" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }

  // n gloo ranks of comm_check with `args`, rendezvous through `store` (default: a file store).
  std::vector<Proc> start_gloo(int n, const std::vector<std::string>& args, std::string store = "",
                               std::map<std::string, std::string> extra = {}) {
    if (store.empty()) store = "file:" + path("store");
    std::vector<Proc> ps;
    for (int r = 0; r < n; r++) {
      std::map<std::string, std::string> env = {{"MEGASCALE_BACKEND", "gloo"}, {"RANK", std::to_string(r)},
                                                {"WORLD_SIZE", std::to_string(n)}, {"MEGASCALE_STORE", store},
                                                {"MEGASCALE_RUN_ID", "run" + std::to_string(runs_)}};
      for (const auto& [k, v] : extra) env[k] = v;
      std::vector<std::string> argv = {kWorker};
      argv.insert(argv.end(), args.begin(), args.end());
      ps.push_back(spawn(argv, env, path("out." + std::to_string(r))));
    }
    runs_++;
    return ps;
  }

  Proc start_mpi(int n, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"mpirun", "-np", std::to_string(n), "--oversubscribe", kWorker};
    argv.insert(argv.end(), args.begin(), args.end());
    return spawn(argv, {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}}, path("mpirun.out"));
  }

  static std::vector<Proc*> ptrs(std::vector<Proc>& ps) {
    std::vector<Proc*> out;
    for (auto& p : ps) out.push_back(&p);
    return out;
  }

  int runs_ = 0;
};

// The grid each world size checks its sub-groups on.
std::string grid_for(int n, bool mpi) {
  if (n == 2) return "tp-dp-pp:2,1,1";
  if (n == 3) return "dp-tp-pp:1,3,1";
  return mpi ? "tp-pp-dp:2,1,2" : "tp-dp-pp:2,2,1";
}

// ---------------------------------------------------------------------------------------------
// In-process

TEST(CommEnvTest, ReadsTheLauncherVariables) {
  for (const char* v : {"MEGASCALE_BACKEND", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_NTASKS", "SLURM_PROCID"})
    unsetenv(v);
  setenv("WORLD_SIZE", "4", 1);
  setenv("RANK", "3", 1);
  setenv("MEGASCALE_STORE", "file:/tmp/x", 1);
  setenv("MEGASCALE_RUN_ID", "abc", 1);
  CommEnv env = CommEnv::from_environment();
  EXPECT_EQ(env.backend, "gloo");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.store, "file:/tmp/x");
  EXPECT_EQ(env.run_id, "abc");
  setenv("RANK", "x3", 1);
  try {
    CommEnv::from_environment();
    ADD_FAILURE() << "malformed RANK accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RANK='x3'"), std::string::npos) << e.what();
  }
  setenv("RANK", "4", 1);
  EXPECT_THROW(CommEnv::from_environment(), Error);  // rank >= world size
  setenv("RANK", "0", 1);
  setenv("MEGASCALE_BACKEND", "nccl", 1);  // GPU buffers: RANK / WORLD_SIZE as for gloo
  EXPECT_EQ(CommEnv::from_environment().backend, "nccl");
  setenv("MEGASCALE_BACKEND", "ucx", 1);
  EXPECT_THROW(CommEnv::from_environment(), Error);
  unsetenv("MEGASCALE_BACKEND");
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  env = CommEnv::from_environment();
  EXPECT_EQ(env.backend, "mpi");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world_size, 2);
  for (const char* v : {"WORLD_SIZE", "RANK", "MEGASCALE_STORE", "MEGASCALE_RUN_ID", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_RANK"})
    unsetenv(v);
  EXPECT_EQ(CommEnv::from_environment().backend, "self");
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_STREQ(dtype_name(DType::kF32), "fp32");
  EXPECT_STREQ(reduce_op_name(ReduceOp::kMax), "max");
}

// An srun step without PMIx: Gloo, the task's place from the SLURM_* variables, the run id from the
// job and step, the address found on an interface (never loopback); under srun --mpi=pmix the ranks
// per node come from Slurm too.
TEST(CommEnvTest, ReadsSlurmStepVariables) {
  for (const char* v : {"MEGASCALE_BACKEND", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK",
                        "WORLD_SIZE", "RANK", "MEGASCALE_HOST", "MEGASCALE_RUN_ID", "MEGASCALE_HOST_INDEX"})
    unsetenv(v);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_JOB_ID", "77", 1);
  setenv("SLURM_NTASKS", "4", 1);
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_LOCALID", "1", 1);
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2)", 1);
  CommEnv env = CommEnv::from_environment();
  EXPECT_EQ(env.backend, "gloo");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world_size, 4);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.host_index, 1);
  EXPECT_EQ(env.run_id, "slurm-77.0");
  EXPECT_EQ(env.hostname, first_interface_address());
  EXPECT_NE(env.hostname.rfind("127.", 0), 0u) << env.hostname;
  setenv("MEGASCALE_HOST", "10.1.2.3", 1);  // an explicit address wins
  EXPECT_EQ(CommEnv::from_environment().hostname, "10.1.2.3");
  unsetenv("MEGASCALE_HOST");
  setenv("PMIX_RANK", "3", 1);  // srun --mpi=pmix
  env = CommEnv::from_environment();
  EXPECT_EQ(env.backend, "mpi");
  EXPECT_EQ(env.local_world_size, 2);
  setenv("SLURM_STEP_TASKS_PER_NODE", "x", 1);
  EXPECT_THROW(CommEnv::from_environment(), Error);
  for (const char* v : {"SLURM_STEP_ID", "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
                        "SLURM_STEP_TASKS_PER_NODE", "PMIX_RANK"})
    unsetenv(v);
  EXPECT_EQ(CommEnv::from_environment().backend, "self");
}

// staged: every buffer through the GPU staging path, host memory standing in (comm/staging.h).
void check_self_world(bool staged) {
  CommEnv env;
  auto world = init_world(env);
  world->stage_host_buffers(staged);
  EXPECT_EQ(world->size(), 1);
  EXPECT_STREQ(world->backend(), "self");
  std::vector<float> a = {1, 2, 3};
  world->all_reduce(a.data(), 3, DType::kF32, ReduceOp::kSum);
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  std::vector<float> out(3, 0);
  world->reduce_scatter(a.data(), out.data(), 3, DType::kF32, ReduceOp::kMax);
  EXPECT_EQ(out, a);
  std::vector<uint16_t> h = {7, 8}, g(2, 0);
  world->all_gather(h.data(), g.data(), 2, DType::kBF16);
  EXPECT_EQ(g, h);
  world->broadcast(a.data(), 3, DType::kF32, 0);
  world->barrier();
  auto sub = world->new_group({0}, "solo");  // inherits the staging
  EXPECT_EQ(sub->name(), "solo");
  CommWork w = sub->start_all_reduce(a.data(), 3, DType::kF32, ReduceOp::kSum);
  w.wait_on(Stream{});  // a host engine: wait_on is wait()
  EXPECT_TRUE(w.done());
  EXPECT_EQ(a, (std::vector<float>{1, 2, 3}));
  EXPECT_THROW(world->new_group({1}, "bad"), Error);
  EXPECT_THROW(world->send(a.data(), 4, 0, 0), Error);  // no other rank
  EXPECT_THROW(world->broadcast(a.data(), 3, DType::kF32, 1), Error);
  // reduce_scatter: out may be in + rank*shard, nothing else that overlaps
  EXPECT_THROW(world->reduce_scatter(a.data(), a.data() + 1, 2, DType::kF32, ReduceOp::kSum), Error);
  env.world_size = 2;
  EXPECT_THROW(init_world(env), Error);
}

TEST(CommSelfTest, EveryOpIsACopy) { check_self_world(false); }
TEST(CommSelfTest, EveryOpIsACopyThroughStaging) { check_self_world(true); }

TEST(CommTraceTest, RingBufferKeepsTheLastOpsInOrder) {
  CommEnv env;
  env.trace_capacity = 8;
  auto world = init_world(env);
  auto g = world->new_group({0}, "trace-test");
  std::vector<float> buf(10, 1.0f);
  std::vector<CommWork> works;
  for (int i = 0; i < 20; i++) works.push_back(g->start_all_reduce(buf.data(), 1 + i % 10, DType::kF32, ReduceOp::kSum));
  for (auto& w : works) w.wait();
  std::vector<TraceRecord> recs = TraceSink::get().snapshot(TraceTrack::kComm);
  ASSERT_EQ(recs.size(), 8u);
  for (size_t i = 0; i < recs.size(); i++) {
    const uint64_t seq = 12 + i;
    EXPECT_EQ(recs[i].group, "trace-test");
    EXPECT_EQ(recs[i].name, "all_reduce");
    EXPECT_EQ(recs[i].seq, seq);
    EXPECT_EQ(recs[i].bytes, (1 + seq % 10) * 4);
    EXPECT_EQ(recs[i].status, "ok");
    EXPECT_EQ(recs[i].peer, -1);
    EXPECT_LE(recs[i].enqueue_ns, recs[i].start_ns);
    EXPECT_LE(recs[i].start_ns, recs[i].end_ns);
    if (i) {
      EXPECT_LE(recs[i - 1].end_ns, recs[i].start_ns);  // the group's one queue, in start order
    }
  }
}

TEST(CommStoreTest, UnreachableRedisIsANamedErrorWithinSeconds) {
  const int port = free_port();  // nothing listens there
  CommEnv env;
  env.backend = "gloo";
  env.world_size = 2;
  env.store = "redis://127.0.0.1:" + std::to_string(port);
  env.timeout = std::chrono::milliseconds(2000);
  const auto t0 = Clock::now();
  try {
    init_world(env);
    ADD_FAILURE() << "rendezvous through a closed port succeeded";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unreachable"), std::string::npos) << e.what();
  }
  // The probe gives up after min(timeout, 5 s) = 2 s; 5x that as the bound (a loaded machine).
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(CommStoreTest, BadStoresAreNamed) {
  CommEnv env;
  env.backend = "gloo";
  env.world_size = 2;
  env.timeout = std::chrono::milliseconds(2000);
  env.store = "file:/proc/megascale_cannot_exist/store";
  try {
    init_world(env);
    ADD_FAILURE() << "store in /proc accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/megascale_cannot_exist/store"), std::string::npos) << e.what();
  }
  env.store = "tcp://host:1";
  EXPECT_THROW(init_world(env), Error);
  env.store = "";
  EXPECT_THROW(init_world(env), Error);
}

// ---------------------------------------------------------------------------------------------
// Every op on every backend and world size, against closed forms

class CommOpsTest : public CommProcTest, public ::testing::WithParamInterface<int> {};

TEST_P(CommOpsTest, GlooMatchesClosedForms) {
  const int n = GetParam();
  const auto t0 = Clock::now();
  auto ps = start_gloo(n, {"--mode", "ops", "--grid", grid_for(n, false), "--timeout-ms", "20000"});
  wait_all(ptrs(ps), t0, 60);
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(ps[r].code, 0) << "rank " << r << ":\n" << ps[r].output();
    EXPECT_NE(ps[r].output().find("PASS"), std::string::npos) << ps[r].output();
  }
}

TEST_P(CommOpsTest, MpiMatchesClosedForms) {
  const int n = GetParam();
  const auto t0 = Clock::now();
  Proc p = start_mpi(n, {"--mode", "ops", "--grid", grid_for(n, true), "--timeout-ms", "20000"});
  wait_all({&p}, t0, 60);
  const std::string out = p.output();
  EXPECT_EQ(p.code, 0) << out;
  size_t passes = 0;
  for (size_t at = out.find("PASS"); at != std::string::npos; at = out.find("PASS", at + 1)) passes++;
  EXPECT_EQ(passes, static_cast<size_t>(n)) << out;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CommOpsTest, ::testing::Values(2, 3, 4));

// The same closed forms with every buffer through the GPU staging path (host memory standing in
// for device memory, comm/staging.h): Gloo at 2 and 3 ranks, MPI at 2.
class CommStagedOpsTest : public CommProcTest, public ::testing::WithParamInterface<int> {};

TEST_P(CommStagedOpsTest, GlooStagedMatchesClosedForms) {
  const int n = GetParam();
  const auto t0 = Clock::now();
  auto ps = start_gloo(n, {"--mode", "ops", "--stage", "--grid", grid_for(n, false), "--timeout-ms", "20000"});
  wait_all(ptrs(ps), t0, 60);
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(ps[r].code, 0) << "rank " << r << ":\n" << ps[r].output();
    EXPECT_NE(ps[r].output().find("PASS"), std::string::npos) << ps[r].output();
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CommStagedOpsTest, ::testing::Values(2, 3));

TEST_F(CommProcTest, MpiStagedMatchesClosedForms) {
  const auto t0 = Clock::now();
  Proc p = start_mpi(2, {"--mode", "ops", "--stage", "--grid", grid_for(2, true), "--timeout-ms", "20000"});
  wait_all({&p}, t0, 60);
  EXPECT_EQ(p.code, 0) << p.output();
  EXPECT_NE(p.output().find("PASS"), std::string::npos) << p.output();
}

// ---------------------------------------------------------------------------------------------
// Rendezvous

// A redis-server on a free loopback port with a password, stopped by its pidfile at the end.
class RedisServer {
 public:
  explicit RedisServer(const std::string& dir) : dir_(dir), port_(free_port()) {
    const std::string cmd = "redis-server --bind 127.0.0.1 --port " + std::to_string(port_) +
                            " --save '' --appendonly no --daemonize yes --requirepass s3cret --dir " + dir +
                            " --pidfile " + pidfile() + " --logfile " + dir + "/redis.log";
    const auto r = ms::testing::run_cmd(cmd);
    EXPECT_EQ(r.code, 0) << r.output;
    for (int i = 0; i < 300 && slurp(pidfile()).empty(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_FALSE(slurp(pidfile()).empty()) << "redis-server did not start: " << slurp(dir + "/redis.log");
  }
  ~RedisServer() {
    kill_pid_file(pidfile(), "redis-server", SIGTERM);
    kill_pid_file(pidfile(), "redis-server");  // if it is still there
  }
  int port() const { return port_; }

 private:
  std::string pidfile() const { return dir_ + "/redis.pid"; }
  std::string dir_;
  int port_;
};

TEST_F(CommProcTest, RedisStoreWithAuth) {
  RedisServer redis(dir_.string());
  const std::string store = "redis://127.0.0.1:" + std::to_string(redis.port());
  auto t0 = Clock::now();
  auto ps = start_gloo(3, {"--mode", "allreduce", "--timeout-ms", "10000"}, store,
                       {{"MEGASCALE_STORE_PASSWORD", "s3cret"}});
  wait_all(ptrs(ps), t0, 30);
  for (int r = 0; r < 3; r++) EXPECT_EQ(ps[r].code, 0) << "rank " << r << ":\n" << ps[r].output();
  // Without the password: a named error, not a hang.
  t0 = Clock::now();
  auto bad = start_gloo(1, {"--mode", "allreduce", "--timeout-ms", "3000"}, store);
  wait_all(ptrs(bad), t0, 30);
  EXPECT_EQ(bad[0].code, 3) << bad[0].output();
  EXPECT_NE(bad[0].output().find("NOAUTH"), std::string::npos) << bad[0].output();
  EXPECT_NE(bad[0].output().find(store), std::string::npos) << bad[0].output();
}

TEST_F(CommProcTest, WorldSizeMismatchIsNamed) {
  const auto t0 = Clock::now();
  std::vector<Proc> ps;
  for (int r = 0; r < 2; r++) {
    ps.push_back(spawn({kWorker, "--mode", "allreduce", "--timeout-ms", "1500"},
                       {{"MEGASCALE_BACKEND", "gloo"}, {"RANK", std::to_string(r)}, {"WORLD_SIZE", r ? "3" : "2"},
                        {"MEGASCALE_STORE", "file:" + path("store")}},
                       path("out." + std::to_string(r))));
  }
  wait_all(ptrs(ps), t0, 30);
  EXPECT_NE(ps[1].code, 0);
  EXPECT_NE(ps[1].output().find("rank 0 has world size 2 but rank 1 has 3"), std::string::npos) << ps[1].output();
  EXPECT_EQ(ps[0].code, 3) << ps[0].output();  // rank 0 waits for rank 1 until the timeout
}

// ---------------------------------------------------------------------------------------------
// Faults: a killed or stopped rank

int elapsed_ms_of(const std::string& out) {
  std::smatch m;
  if (std::regex_search(out, m, std::regex("COMM_ERROR elapsed_ms=([0-9]+)"))) return std::stoi(m[1]);
  return -1;
}

TEST_F(CommProcTest, GlooKilledPeerIsNamedAtOnce) {
  const auto t0 = Clock::now();
  // A long op timeout (30 s) so that "noticed at once" (< 10 s, a bound loose enough for a loaded
  // machine) cannot be met by the timeout.
  auto ps = start_gloo(3, {"--mode", "fault", "--victim", "1", "--fault", "kill", "--at", "20", "--timeout-ms", "30000"});
  wait_all(ptrs(ps), t0, 60);
  EXPECT_EQ(ps[1].code, -SIGKILL) << ps[1].output();
  for (int r : {0, 2}) {
    const std::string out = ps[r].output();
    EXPECT_EQ(ps[r].code, 3) << out;
    EXPECT_NE(out.find("all_reduce on group 'world'"), std::string::npos) << out;
    EXPECT_NE(out.find("seq 20"), std::string::npos) << out;
    EXPECT_NE(out.find("waiting on peer 1 (world rank 1)"), std::string::npos) << out;
    EXPECT_NE(out.find("LATER_ERROR"), std::string::npos) << out;  // the group stays unusable
    const int ms = elapsed_ms_of(out);
    EXPECT_GE(ms, 0) << out;
    EXPECT_LT(ms, 10000) << "a dead peer must be noticed well before the 30 s timeout:\n" << out;
  }
}

TEST_F(CommProcTest, GlooStoppedPeerTimesOutNamingIt) {
  const auto t0 = Clock::now();
  auto ps = start_gloo(3, {"--mode", "fault", "--victim", "2", "--fault", "stop", "--at", "20", "--timeout-ms",
                           "3000", "--records-dir", dir_.string()});
  std::vector<Proc*> survivors = {&ps[0], &ps[1]};
  wait_all(survivors, t0, 30);
  // The stopped rank never ends by itself.
  kill(ps[2].pid, SIGKILL);
  wait_all({&ps[2]}, t0, 40);
  for (int r : {0, 1}) {
    const std::string out = ps[r].output();
    EXPECT_EQ(ps[r].code, 3) << out;
    EXPECT_NE(out.find("all_reduce on group 'world' (gloo, seq 20"), std::string::npos) << out;
    EXPECT_NE(out.find("waiting on peer 2 (world rank 2)"), std::string::npos) << out;
    EXPECT_NE(out.find("timed out after 3000 ms"), std::string::npos) << out;
    const int ms = elapsed_ms_of(out);
    EXPECT_GE(ms, 2900) << out;
    EXPECT_LT(ms, 12000) << out;  // 4x the 3 s timeout: a loaded machine
    // The rank's record file (what replaced the ring dump): every op of the world group in order
    // (the 20 all_reduces, seq 0..19, ok), the failing all_reduce with its error, then the refused
    // barrier.
    const RunRecords run = read_run_records(dir_.string());
    const RankRecords* rec = run.find(r);
    ASSERT_NE(rec, nullptr) << "no record file of rank " << r << " in " << run.records_dir;
    std::vector<const CommRecord*> ops;
    for (const CommRecord& c : rec->comms)
      if (c.group == "world") ops.push_back(&c);
    auto dump = [&] {
      std::string s;
      for (const CommRecord* c : ops) s += fmt::format("{} seq {} status '{}'\n", c->op, c->seq, c->status);
      return s;
    };
    ASSERT_EQ(ops.size(), 22u) << dump();
    for (size_t i = 0; i < 22; i++) EXPECT_EQ(ops[i]->seq, static_cast<int64_t>(i)) << dump();
    for (size_t i = 0; i < 20; i++) EXPECT_EQ(ops[i]->status, "ok") << dump();
    EXPECT_EQ(ops[20]->op, "all_reduce");
    EXPECT_NE(ops[20]->status.find("timed out"), std::string::npos) << dump();
    EXPECT_EQ(ops[21]->op, "barrier");
    EXPECT_NE(ops[21]->status.find("unusable"), std::string::npos) << dump();
  }
}

TEST_F(CommProcTest, MpiStoppedPeerTimesOut) {
  const auto t0 = Clock::now();
  Proc p = start_mpi(3, {"--mode", "fault", "--victim", "2", "--fault", "stop", "--at", "20", "--timeout-ms", "3000",
                         "--pid-dir", dir_.string()});
  // The survivors fail after the timeout and exit; mpirun then ends the job. The stopped rank is
  // killed by pid if mpirun leaves it behind, once both survivors have reported (not before: its
  // death would end their wait early).
  auto reported = [&] {
    const std::string out = p.output();
    size_t n = 0;
    for (size_t at = out.find("COMM_ERROR elapsed_ms="); at != std::string::npos; at = out.find("COMM_ERROR elapsed_ms=", at + 1)) n++;
    return n >= 2;
  };
  wait_all({&p}, t0, 40, [&] { return reported() || seconds_since(t0) > 36; });
  kill_pid_file(path("pid.2"), "comm_check");
  wait_all({&p}, t0, 60);
  const std::string out = p.output();
  EXPECT_NE(p.code, 0) << out;
  EXPECT_NE(out.find("all_reduce on group 'world' (mpi, seq 20"), std::string::npos) << out;
  EXPECT_NE(out.find("timed out after 3000 ms"), std::string::npos) << out;
  const int ms = elapsed_ms_of(out);
  EXPECT_GE(ms, 2900) << out;
  EXPECT_LT(ms, 12000) << out;  // 4x the 3 s timeout: a loaded machine
  for (int r : {0, 1}) kill_pid_file(path("pid." + std::to_string(r)), "comm_check");
}

TEST_F(CommProcTest, MpiKilledPeerAbortsTheJob) {
  const auto t0 = Clock::now();
  Proc p = start_mpi(3, {"--mode", "fault", "--victim", "1", "--fault", "kill", "--at", "20", "--timeout-ms", "3000",
                         "--pid-dir", dir_.string()});
  wait_all({&p}, t0, 30);
  EXPECT_NE(p.code, 0) << p.output();
  EXPECT_LT(p.end_s, 15.0) << p.output();
  for (int r : {0, 1, 2}) kill_pid_file(path("pid." + std::to_string(r)), "comm_check");
}

}  // namespace
}  // namespace ms
