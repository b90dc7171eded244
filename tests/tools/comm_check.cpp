// comm_check: one rank of a communication test, launched N times by tests/test_comm.cpp (gloo:
// RANK/WORLD_SIZE/MEGASCALE_STORE in the environment; mpi: under mpirun). Every result is checked
// against a closed form (rank r contributes values computed from r), every mismatch is printed.
// Exit code: 0 all checks passed, 1 mismatches, 3 CommError (printed as "COMM_ERROR ..."), 2 other.
//   --mode ops        every op, f32 and bf16, sum and max, counts 1, 7, 1000003, in place, async,
//                     send/recv; then the groups of a RankGrid (--grid order:tp,dp,pp)
//   --mode allreduce  one all_reduce (rendezvous tests)
//   --mode fault      all_reduce in a loop; rank --victim SIGKILLs or SIGSTOPs itself (--fault) at
//                     iteration --at; the others must end in a CommError (--records-dir: each rank
//                     also writes its record file, whose comm lines must show the failure)
//   --mode latency    not a check: rank 0 prints the mean time of all_reduce and barrier
//   --mode cross      two groups with the same members (two sub-groups, then the world and a
//                     sub-group); even ranks start a collective on the first and then on the second,
//                     odd ranks the other way round, then both wait (a cycle with one comm thread
//                     per process; none with one per communicator)
//   --mode concurrent several groups (the world and --groups - 1 sub-groups), each driven by its own
//                     caller thread at once: a child group created from each at the same time,
//                     streams of collectives and send/recv, three in flight per group; then the
//                     sub-groups are leaked with an op still queued, so the exit handler must
//                     drain and join their threads (before MPI_Finalize on mpi)
#include <signal.h>  // raise
#include <unistd.h>  // getpid

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>  // std::iota
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "base/bf16.h"
#include "base/device.h"  // DeviceBuffer, copy_bytes (--device cuda)
#include "comm/comm_env.h"
#include "comm/communicator.h"
#include "comm/world.h"
#include "obs/rank_identity.h"
#include "obs/run_recorder.h"
#include "obs/trace_sink.h"
#include "comm/rank_grid.h"

namespace {

using namespace ms;

std::atomic<int> g_failures{0};  // checks run on several threads in --mode concurrent
std::atomic<long> g_checks{0};    // elements compared

#define EXPECT(cond, ...)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      if (g_failures++ < 20) fmt::print("FAIL {}:{}: {}\n", __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
    }                                                                                  \
  } while (0)

// Contributions: element i of world rank w. Small integers: sums and maxima are exact in bf16.
float v_sum(int w, size_t i) { return static_cast<float>(w + static_cast<int>(i % 5)); }
float v_max(int w, size_t i) { return static_cast<float>((w * 7 + static_cast<int>(i % 13) * 3) % 13); }
float value(ReduceOp op, int w, size_t i) { return op == ReduceOp::kSum ? v_sum(w, i) : v_max(w, i); }

float expected(ReduceOp op, const std::vector<int>& members, size_t i) {
  float e = op == ReduceOp::kSum ? 0.0f : -1e30f;
  for (int w : members) e = op == ReduceOp::kSum ? e + value(op, w, i) : std::max(e, value(op, w, i));
  return e;
}

// --device cuda: every op's buffers are GPU memory (uploaded before, downloaded after the op).
bool g_gpu = false;
StreamOrder on() { return g_gpu ? StreamOrder{Device::kCuda, Stream{}} : StreamOrder{}; }

// A buffer of either dtype, read and written as float on the host; data() / at() address the
// device copy with --device cuda (push() before an op, pull() after it).
struct Buf {
  DType t;
  std::vector<float> f;
  std::vector<bf16_t> h;
  DeviceBuffer<char> d;
  Buf(DType type, size_t n, float fill = -7.0f) : t(type) {
    if (t == DType::kF32) f.assign(n, fill);
    else h.assign(n, f32_to_bf16_rne(fill));
  }
  size_t bytes() const { return (t == DType::kF32 ? f.size() : h.size()) * dtype_size(t); }
  void* host() { return t == DType::kF32 ? static_cast<void*>(f.data()) : static_cast<void*>(h.data()); }
  void* hat(size_t i) { return static_cast<char*>(host()) + i * dtype_size(t); }
  void* data() { return g_gpu ? static_cast<void*>(d.data()) : host(); }
  void* at(size_t i) { return static_cast<char*>(data()) + i * dtype_size(t); }
  void push() {
    if (!g_gpu) return;
    d.resize(bytes());
    copy_bytes(d.data(), Device::kCuda, host(), Device::kCpu, bytes());
    stream_sync({});
  }
  void pull() {
    if (!g_gpu) return;
    copy_bytes(host(), Device::kCpu, d.data(), Device::kCuda, bytes());
    stream_sync({});
  }
  float get(size_t i) const { return t == DType::kF32 ? f[i] : bf16_to_f32(h[i]); }
  void set(size_t i, float v) {
    if (t == DType::kF32) f[i] = v;
    else h[i] = f32_to_bf16_rne(v);
  }
};

// Compares got[i] with want(i) for i < n; prints the first mismatch of the check.
template <class F>
void check(const char* what, const Communicator& c, DType t, size_t n, const Buf& got, size_t off, F want) {
  size_t bad = 0;
  g_checks += n;
  for (size_t i = 0; i < n; i++) {
    const float g = got.get(off + i), w = want(i);
    if (g != w) {
      if (bad == 0)
        EXPECT(false, "{} on '{}' (rank {} of {}) {} n={}: [{}] = {} want {}", what, c.name(), c.rank(), c.size(),
               dtype_name(t), n, i, g, w);
      bad++;
    }
  }
  if (bad > 1) fmt::print("  ... {} mismatches in all\n", bad);
}

void check_all_reduce(Communicator& c, DType t, ReduceOp op, size_t n) {
  const int me = c.world_ranks()[c.rank()];
  Buf b(t, n);
  for (size_t i = 0; i < n; i++) b.set(i, value(op, me, i));
  b.push();
  c.all_reduce(b.data(), n, t, op, on());
  b.pull();
  check("all_reduce", c, t, n, b, 0, [&](size_t i) { return expected(op, c.world_ranks(), i); });
}

void check_reduce_scatter(Communicator& c, DType t, ReduceOp op, size_t shard, bool in_place) {
  const int me = c.world_ranks()[c.rank()], n = c.size();
  Buf in(t, shard * n), out(t, shard);
  for (size_t i = 0; i < shard * n; i++) in.set(i, value(op, me, i));
  in.push(), out.push();
  void* dst = in_place ? in.at(c.rank() * shard) : out.data();
  c.reduce_scatter(in.data(), dst, shard, t, op, on());
  in.pull(), out.pull();
  const Buf& got = in_place ? in : out;
  const size_t off = in_place ? c.rank() * shard : 0;
  check(in_place ? "reduce_scatter(in place)" : "reduce_scatter", c, t, shard, got, off,
        [&](size_t i) { return expected(op, c.world_ranks(), c.rank() * shard + i); });
  if (in_place)  // the other shards of the input are left alone
    check("reduce_scatter(in place) input", c, t, c.rank() * shard, in, 0, [&](size_t i) { return value(op, me, i); });
}

void check_all_gather(Communicator& c, DType t, size_t shard, bool in_place) {
  const int me = c.world_ranks()[c.rank()], n = c.size();
  Buf in(t, shard), out(t, shard * n);
  for (size_t i = 0; i < shard; i++) {
    if (in_place) out.set(c.rank() * shard + i, v_sum(me, c.rank() * shard + i));
    else in.set(i, v_sum(me, c.rank() * shard + i));
  }
  in.push(), out.push();
  const void* src = in_place ? out.at(c.rank() * shard) : in.data();
  c.all_gather(src, out.data(), shard, t, on());
  out.pull();
  check(in_place ? "all_gather(in place)" : "all_gather", c, t, shard * n, out, 0,
        [&](size_t i) { return v_sum(c.world_ranks()[i / shard], i); });
}

void check_broadcast(Communicator& c, DType t, size_t n, int root) {
  const int me = c.world_ranks()[c.rank()];
  Buf b(t, n);
  if (c.rank() == root)
    for (size_t i = 0; i < n; i++) b.set(i, v_sum(me, i));
  b.push();
  c.broadcast(b.data(), n, t, root, on());
  b.pull();
  check("broadcast", c, t, n, b, 0, [&](size_t i) { return v_sum(c.world_ranks()[root], i); });
}

// Three all-reduces in flight at once, waited in reverse order.
void check_async(Communicator& c, DType t) {
  const int me = c.world_ranks()[c.rank()];
  const size_t sizes[3] = {5, 100003, 17};
  std::vector<Buf> bufs;
  for (size_t n : sizes) {
    bufs.emplace_back(t, n);
    for (size_t i = 0; i < n; i++) bufs.back().set(i, v_sum(me, i));
  }
  std::vector<CommWork> w;
  for (Buf& b : bufs) b.push();
  for (int k = 0; k < 3; k++) w.push_back(c.start_all_reduce(bufs[k].data(), sizes[k], t, ReduceOp::kSum, on()));
  for (int k = 2; k >= 0; k--) w[k].wait();
  for (Buf& b : bufs) b.pull();
  for (int k = 0; k < 3; k++)
    check("async all_reduce", c, t, sizes[k], bufs[k], 0,
          [&](size_t i) { return expected(ReduceOp::kSum, c.world_ranks(), i); });
}

// Ring exchange: everybody sends two tagged messages to the next rank and receives from the
// previous one, both started before either is waited on; the recvs are started in the opposite
// tag order, so matching must go by tag.
void check_send_recv(Communicator& c) {
  const int n = c.size(), r = c.rank();
  if (n < 2) return;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto pattern = [](int from, int tag, size_t i) { return static_cast<uint8_t>(from * 31 + tag * 7 + i); };
  const size_t sizes[2] = {3, 300001};
  std::vector<std::vector<uint8_t>> out(2), in(2);
  for (int k = 0; k < 2; k++) {
    out[k].resize(sizes[k]);
    in[k].assign(sizes[k], 0);
    for (size_t i = 0; i < sizes[k]; i++) out[k][i] = pattern(r, k + 10, i);
  }
  std::vector<DeviceBuffer<uint8_t>> din(2), dout(2);
  auto ptr = [&](std::vector<std::vector<uint8_t>>& h, std::vector<DeviceBuffer<uint8_t>>& d, int k) {
    return g_gpu ? d[k].data() : h[k].data();
  };
  if (g_gpu)
    for (int k = 0; k < 2; k++) {
      din[k].resize(sizes[k]), dout[k].resize(sizes[k]);
      dout[k].upload(out[k].data(), sizes[k]);
    }
  if (g_gpu) stream_sync({});
  std::vector<CommWork> w;
  w.push_back(c.start_recv(ptr(in, din, 1), sizes[1], prev, 11, on()));
  w.push_back(c.start_send(ptr(out, dout, 0), sizes[0], next, 10, on()));
  w.push_back(c.start_send(ptr(out, dout, 1), sizes[1], next, 11, on()));
  w.push_back(c.start_recv(ptr(in, din, 0), sizes[0], prev, 10, on()));
  for (auto& x : w) x.wait();
  if (g_gpu) {
    for (int k = 0; k < 2; k++) din[k].download(in[k].data(), sizes[k]);
    stream_sync({});
  }
  for (int k = 0; k < 2; k++) {
    size_t bad = 0;
    for (size_t i = 0; i < sizes[k]; i++) bad += in[k][i] != pattern(prev, k + 10, i);
    EXPECT(bad == 0, "send/recv on '{}' tag {}: {} wrong bytes from rank {}", c.name(), k + 10, bad, prev);
  }
}

// Sums of non-integers: on gloo the result is exactly the rank-order sum ((x0 + x1) + x2) + ...
// (bf16: rounded to nearest even after every addition); on every backend each rank holds the
// same bits (checked by gathering everybody's result).
void check_same_bits(Communicator& c, DType t) {
  const size_t n = 4099;
  auto x = [](int w, size_t i) { return static_cast<float>((w * 131 + static_cast<int>(i) * 17) % 1000) / 7.0f - 50.0f; };
  const int me = c.world_ranks()[c.rank()];
  Buf b(t, n), ref(t, 1);
  for (size_t i = 0; i < n; i++) b.set(i, x(me, i));
  b.push();
  c.all_reduce(b.data(), n, t, ReduceOp::kSum, on());
  b.pull();
  if (std::string(c.backend()) == "gloo") {
    check("rank-order all_reduce", c, t, n, b, 0, [&](size_t i) {
      ref.set(0, x(c.world_ranks()[0], i));
      float acc = ref.get(0);
      for (int r = 1; r < c.size(); r++) {
        ref.set(0, x(c.world_ranks()[r], i));
        ref.set(0, acc + ref.get(0));  // fp32 add, then (bf16) rounding
        acc = ref.get(0);
      }
      return acc;
    });
  }
  Buf all(t, n * c.size());
  all.push();
  c.all_gather(b.data(), all.data(), n, t, on());
  all.pull();
  const size_t bytes = n * dtype_size(t);
  for (int r = 0; r < c.size(); r++)
    EXPECT(std::memcmp(all.hat(r * n), b.host(), bytes) == 0, "all_reduce on '{}' {}: rank {} got other bits than rank {}",
           c.name(), dtype_name(t), c.world_ranks()[r], me);
}

void check_ops(Communicator& c, bool big) {
  const size_t n = c.size();
  std::vector<size_t> counts = {1, 7, 1000};
  if (big) counts.push_back(1000003);
  for (DType t : {DType::kF32, DType::kBF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (size_t count : counts) {
        check_all_reduce(c, t, op, count);
        const size_t shard = count >= 1000 ? count / n : count;
        check_reduce_scatter(c, t, op, shard, false);
        check_reduce_scatter(c, t, op, shard, true);
      }
    }
    for (size_t count : counts) {
      const size_t shard = count >= 1000 ? count / n : count;
      check_all_gather(c, t, shard, false);
      check_all_gather(c, t, shard, true);
    }
    for (int root = 0; root < c.size(); root++) check_broadcast(c, t, root == 0 && big ? 1000003 : 7, root);
    check_async(c, t);
    check_same_bits(c, t);
  }
  check_send_recv(c);
  c.barrier();
}

// The trace of group g: ops with consecutive collective seqs, status ok, bytes as started.
void check_trace(const std::string& group, size_t min_records) {
  std::vector<TraceRecord> recs;
  for (const TraceRecord& r : TraceSink::get().snapshot(TraceTrack::kComm))
    if (r.group == group && r.name != "send" && r.name != "recv") recs.push_back(r);
  EXPECT(recs.size() >= min_records, "trace of '{}': {} records, want >= {}", group, recs.size(), min_records);
  for (size_t i = 0; i < recs.size(); i++) {
    EXPECT(recs[i].status == "ok", "trace '{}' seq {}: status '{}'", group, recs[i].seq, recs[i].status);
    EXPECT(recs[i].end_ns >= recs[i].start_ns && recs[i].start_ns >= recs[i].enqueue_ns, "trace times out of order");
    if (i) EXPECT(recs[i].seq == recs[i - 1].seq + 1, "trace '{}': seq {} after {}", group, recs[i].seq, recs[i - 1].seq);
  }
}

void check_grid(std::unique_ptr<Communicator> world, const std::string& spec) {
  // spec: "order:tp,dp,pp", e.g. "tp-dp-pp:2,2,1"
  const size_t colon = spec.find(':');
  GridShape shape;
  MS_CHECK(colon != std::string::npos && std::sscanf(spec.c_str() + colon + 1, "%d,%d,%d", &shape.tp, &shape.dp,
                                                     &shape.pp) == 3, "bad --grid '{}'", spec);
  RankGrid grid(std::move(world), spec.substr(0, colon), shape);
  const int me = grid.world().rank();
  for (ParallelDim d : {ParallelDim::kTp, ParallelDim::kDp, ParallelDim::kPp}) {
    Communicator& g = grid.group(d);
    const auto members = grid.layout().group(d, me);
    EXPECT(g.world_ranks() == members, "group '{}' members differ from the layout", g.name());
    EXPECT(g.name() == grid.layout().group_name(d, me), "group name '{}'", g.name());
    EXPECT(g.world_ranks()[g.rank()] == me, "group '{}': rank {} is not world rank {}", g.name(), g.rank(), me);
    check_ops(g, false);
  }
  // Groups of different dimensions with collectives in flight at once.
  Buf a(DType::kF32, 1001), b(DType::kF32, 1001);
  for (size_t i = 0; i < 1001; i++) a.set(i, v_sum(me, i)), b.set(i, v_sum(me, i));
  a.push(), b.push();
  CommWork wa = grid.tp().start_all_reduce(a.data(), 1001, DType::kF32, ReduceOp::kSum, on());
  CommWork wb = grid.dp().start_all_reduce(b.data(), 1001, DType::kF32, ReduceOp::kSum, on());
  wb.wait();
  wa.wait();
  a.pull(), b.pull();
  check("tp all_reduce", grid.tp(), DType::kF32, 1001, a, 0,
        [&](size_t i) { return expected(ReduceOp::kSum, grid.tp().world_ranks(), i); });
  check("dp all_reduce", grid.dp(), DType::kF32, 1001, b, 0,
        [&](size_t i) { return expected(ReduceOp::kSum, grid.dp().world_ranks(), i); });
  grid.world().barrier();
}

// ---------------------------------------------------------------------------------------------
// Streams: groups progress independently (--mode cross, --mode concurrent)

// Element i of world rank w in round k on the group with index g: small integers, so sums of up to
// 4 ranks are exact in fp32 and bf16; g and k in the value catch results landing in another
// group's or another round's buffer.
float v_stream(int w, int g, int k, size_t i) { return static_cast<float>((w * 5 + g * 11 + k * 3 + int(i % 7)) % 61); }

enum StreamKind { kStreamAllReduce = 0, kStreamAllGather, kStreamReduceScatter, kStreamBroadcast };

struct StreamOp {
  int kind = 0, g = 0, k = 0;
  DType t = DType::kF32;
  size_t n = 0;  // all_reduce / broadcast: elements; all_gather / reduce_scatter: shard elements
  Buf in{DType::kF32, 0}, out{DType::kF32, 0};
  CommWork work;
};

// Starts round k of group index g on c: op `kind`, fp32 or bf16, one of three sizes.
StreamOp start_stream_op(Communicator& c, int g, int k, int kind) {
  StreamOp o;
  o.kind = kind, o.g = g, o.k = k;
  o.t = (k / 4) % 2 ? DType::kBF16 : DType::kF32;
  const size_t sizes[3] = {1, 1031, 40009};
  o.n = sizes[k % 3];
  const int me = c.world_ranks()[c.rank()], n = c.size();
  switch (kind) {
    case kStreamAllReduce:
      o.in = Buf(o.t, o.n);
      for (size_t i = 0; i < o.n; i++) o.in.set(i, v_stream(me, g, k, i));
      o.work = c.start_all_reduce(o.in.data(), o.n, o.t, ReduceOp::kSum);
      break;
    case kStreamAllGather:
      o.in = Buf(o.t, o.n), o.out = Buf(o.t, o.n * n);
      for (size_t i = 0; i < o.n; i++) o.in.set(i, v_stream(me, g, k, i));
      o.work = c.start_all_gather(o.in.data(), o.out.data(), o.n, o.t);
      break;
    case kStreamReduceScatter:
      o.in = Buf(o.t, o.n * n), o.out = Buf(o.t, o.n);
      for (size_t i = 0; i < o.n * n; i++) o.in.set(i, v_stream(me, g, k, i));
      o.work = c.start_reduce_scatter(o.in.data(), o.out.data(), o.n, o.t, ReduceOp::kSum);
      break;
    default: {
      const int root = k % n;
      o.in = Buf(o.t, o.n);
      if (c.rank() == root)
        for (size_t i = 0; i < o.n; i++) o.in.set(i, v_stream(me, g, k, i));
      o.work = c.start_broadcast(o.in.data(), o.n, o.t, root);
    }
  }
  return o;
}

// Checks a finished stream op against its closed form.
void check_stream_op(const Communicator& c, const StreamOp& o) {
  const std::vector<int>& members = c.world_ranks();
  auto sum = [&](size_t i) {
    float e = 0;
    for (int w : members) e += v_stream(w, o.g, o.k, i);
    return e;
  };
  const size_t n = o.n;
  switch (o.kind) {
    case kStreamAllReduce:
      check("stream all_reduce", c, o.t, n, o.in, 0, sum);
      break;
    case kStreamAllGather:
      check("stream all_gather", c, o.t, n * c.size(), o.out, 0,
            [&](size_t i) { return v_stream(members[i / n], o.g, o.k, i % n); });
      break;
    case kStreamReduceScatter:
      check("stream reduce_scatter", c, o.t, n, o.out, 0, [&](size_t i) { return sum(c.rank() * n + i); });
      break;
    default:
      check("stream broadcast", c, o.t, n, o.in, 0,
            [&](size_t i) { return v_stream(members[o.k % c.size()], o.g, o.k, i); });
  }
}

std::vector<int> every_rank(const Communicator& c) {
  std::vector<int> all(c.size());
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// Two groups x, y with the same members: even world ranks start on x then y, odd ranks on y then x,
// then wait for both. With one FIFO comm thread per process, rank 0 would run x's collective
// waiting for rank 1, which runs y's waiting for rank 0, until the deadline.
void check_cross_order(Communicator& world, int rounds) {
  auto a = world.new_group(every_rank(world), "cross-a");
  auto b = world.new_group(every_rank(world), "cross-b");
  struct Pair {
    Communicator* x;
    int gx;
    Communicator* y;
    int gy;
  };
  const bool odd = world.rank() % 2;
  for (const Pair& p : {Pair{a.get(), 1, b.get(), 2}, Pair{&world, 0, a.get(), 1}}) {
    for (int k = 0; k < rounds; k++) {
      const int kind = k % 2 ? kStreamAllReduce : kStreamAllGather;
      StreamOp first = odd ? start_stream_op(*p.y, p.gy, k, kind) : start_stream_op(*p.x, p.gx, k, kind);
      StreamOp second = odd ? start_stream_op(*p.x, p.gx, k, kind) : start_stream_op(*p.y, p.gy, k, kind);
      first.work.wait();
      second.work.wait();
      check_stream_op(odd ? *p.y : *p.x, first);
      check_stream_op(odd ? *p.x : *p.y, second);
    }
  }
  fmt::print("cross: {} rounds on (cross-a, cross-b) and (world, cross-a)\n", rounds);
}

// `groups` groups over every rank (the world and groups - 1 sub-groups), each driven by its own
// caller thread at once: `rounds` collectives, three in flight at a time (waited in reverse order),
// kinds depending on the group so different groups run different ops at the same time; a ring of
// send/recv every ninth round; each thread first creates a child of its group (all at once) and
// ends with one op of each kind on it. Returns 3 when a thread got a CommError. Afterwards the sub-groups
// are leaked with an all_reduce still queued on each: the exit handler must finish and join them.
int check_concurrent(Communicator& world, int groups, int rounds) {
  std::vector<Communicator*> gs = {&world};
  std::vector<std::unique_ptr<Communicator>> owned;
  for (int g = 1; g < groups; g++) {
    owned.push_back(world.new_group(every_rank(world), "conc-" + std::to_string(g)));
    gs.push_back(owned.back().get());
  }
  std::vector<std::string> errors(groups);
  std::vector<std::thread> threads;
  for (int g = 0; g < groups; g++) {
    threads.emplace_back([&, g] {
      Communicator& c = *gs[g];
      try {
        // Groups created from four parents at once (concurrent rendezvous through one store on
        // gloo, concurrent MPI_Comm_create_group on mpi), while the other threads communicate.
        std::unique_ptr<Communicator> child = c.new_group(every_rank(c), c.name() + "/child");
        for (int k = 0; k < rounds; k += 3) {
          std::vector<StreamOp> ops;
          for (int j = k; j < std::min(k + 3, rounds); j++) ops.push_back(start_stream_op(c, g, j, (j + g) % 4));
          for (size_t j = ops.size(); j-- > 0;) ops[j].work.wait();
          for (const StreamOp& o : ops) check_stream_op(c, o);
          if (k % 9 == 0) check_send_recv(c);
        }
        for (int kind = 0; kind < 4; kind++) {
          StreamOp o = start_stream_op(*child, g + groups, rounds + kind, kind);
          o.work.wait();
          check_stream_op(*child, o);
        }
      } catch (const std::exception& e) {
        errors[g] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  int code = 0;
  for (int g = 0; g < groups; g++)
    if (!errors[g].empty()) fmt::print("COMM_ERROR: group {}: {}\n", gs[g]->name(), errors[g]), code = 3;
  if (code) return code;
  fmt::print("concurrent: {} groups x {} rounds\n", groups, rounds);
  // Leaked on purpose, each with an op in flight: the exit handler drains and joins their threads.
  // (The buffer is leaked too: a static would be destroyed before the exit handler runs.)
  auto* tail = new std::vector<float>(4099 * groups, 1.0f);
  for (size_t g = 0; g < owned.size(); g++)
    owned[g]->start_all_reduce(tail->data() + g * 4099, 4099, DType::kF32, ReduceOp::kSum);
  for (auto& c : owned) c.release();
  return 0;
}

int run_fault(Communicator& c, int victim, const std::string& fault, int at) {
  using Clock = std::chrono::steady_clock;
  const int me = c.world_ranks()[c.rank()];
  auto last_ok = Clock::now();
  for (int it = 0;; it++) {
    if (me == victim && it == at) {
      std::fflush(stdout);
      raise(fault == "kill" ? SIGKILL : SIGSTOP);
    }
    Buf b(DType::kF32, 1000);
    for (size_t i = 0; i < 1000; i++) b.set(i, v_sum(me, i));
    try {
      c.all_reduce(b.data(), 1000, DType::kF32, ReduceOp::kSum);
    } catch (const CommError& e) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_ok).count();
      fmt::print("COMM_ERROR elapsed_ms={} iteration={}: {}\n", ms, it, e.what());
      // A later op on the same group fails at once.
      try {
        c.barrier();
        fmt::print("FAIL: barrier after a CommError succeeded\n");
      } catch (const CommError& e2) {
        fmt::print("LATER_ERROR: {}\n", e2.what());
      }
      std::fflush(stdout);
      return 3;
    }
    check("all_reduce", c, DType::kF32, 1000, b, 0, [&](size_t i) { return expected(ReduceOp::kSum, c.world_ranks(), i); });
    if (g_failures.load()) return 1;
    last_ok = Clock::now();
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"comm_check: one rank of a communication test"};
  std::string mode = "ops", grid, fault = "kill", records_dir, pid_dir;
  int timeout_ms = 20000, victim = -1, at = 20, rounds = 30, groups = 4;
  size_t trace_capacity = 4096;
  app.add_option("--mode", mode)->check(CLI::IsMember({"ops", "allreduce", "fault", "latency", "cross", "concurrent"}));
  app.add_option("--grid", grid, "order:tp,dp,pp for the RankGrid checks (ops mode)");
  app.add_option("--timeout-ms", timeout_ms);
  app.add_option("--victim", victim);
  app.add_option("--fault", fault)->check(CLI::IsMember({"kill", "stop"}));
  app.add_option("--at", at);
  app.add_option("--records-dir", records_dir,
                 "write this rank's record file (obs/run_recorder.h) to <dir>/records/rank-RRRRR.jsonl (fault mode)");
  app.add_option("--trace-capacity", trace_capacity);
  app.add_option("--pid-dir", pid_dir, "write <dir>/pid.<rank>");
  app.add_option("--rounds", rounds, "rounds per group (cross, concurrent)");
  app.add_option("--groups", groups, "groups driven at once, the world included (concurrent)");
  bool stage = false;
  std::string device = "cpu";
  app.add_flag("--stage", stage, "host buffers take the staging path of GPU buffers (comm/staging.h) (ops mode)");
  app.add_option("--device", device, "cpu, or cuda: every buffer in GPU memory (ops mode)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);
  g_gpu = device == "cuda";
  try {
    CommEnv env = CommEnv::from_environment();
    env.timeout = std::chrono::milliseconds(timeout_ms);
    env.trace_capacity = trace_capacity;
    auto world = init_world(env);
    world->stage_host_buffers(stage);  // inherited by every group made from it
    const int me = world->rank();
    if (!pid_dir.empty()) std::ofstream(pid_dir + "/pid." + std::to_string(me)) << getpid() << "\n";
    if (mode == "allreduce") {
      check_all_reduce(*world, DType::kF32, ReduceOp::kSum, 1001);
    } else if (mode == "latency") {  // not a test: mean time per op, printed by rank 0
      for (size_t n : {size_t(1), size_t(1000), size_t(1000000)}) {
        std::vector<float> b(n, 1.0f);
        world->barrier();
        const auto t0 = std::chrono::steady_clock::now();
        const int iters = n >= 1000000 ? 20 : 200;
        for (int i = 0; i < iters; i++) world->all_reduce(b.data(), n, DType::kF32, ReduceOp::kSum);
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        if (me == 0) fmt::print("all_reduce n={}: {:.1f} us\n", n, us / iters);
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 200; i++) world->barrier();
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (me == 0) fmt::print("barrier: {:.1f} us\n", us / 200);
    } else if (mode == "fault") {
      // The record file holds every op of the trace sink's communication ring, failures included; the
      // recorder writes what is left when it goes (run_fault returns).
      std::unique_ptr<RunRecorder> recorder;
      if (!records_dir.empty()) {
        RankIdentity id;
        id.rank = me, id.world = world->size(), id.dp = me, id.dp_size = world->size();
        id.pid = static_cast<int>(getpid());
        id.backend = world->backend();
        id.groups[world->name()] = world->world_ranks();
        set_rank_identity(id);
        recorder = std::make_unique<RunRecorder>(fmt::format("{}/records/rank-{:05d}.jsonl", records_dir, me), 100);
      }
      return run_fault(*world, victim, fault, at);
    } else if (mode == "cross") {
      check_cross_order(*world, rounds);
    } else if (mode == "concurrent") {
      if (const int code = check_concurrent(*world, groups, rounds)) return code;
    } else {
      check_ops(*world, true);
      check_trace("world", 20);
      if (!grid.empty()) check_grid(std::move(world), grid);
    }
    std::fflush(stdout);
  } catch (const CommError& e) {
    fmt::print("COMM_ERROR: {}\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    fmt::print("ERROR: {}\n", e.what());
    return 2;
  }
  if (g_failures.load()) fmt::print("{} checks failed\n", g_failures.load());
  else fmt::print("PASS: {} elements checked\n", g_checks.load());
  return g_failures.load() ? 1 : 0;
}
