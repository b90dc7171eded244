// backends/gloo.cpp: the Gloo backend (see gloo.h for what it guarantees).
#include "comm/backends/gloo.h"

#include <signal.h>    // sigaction, SIGPIPE
#include <sys/time.h>  // timeval

#include <hiredis/hiredis.h>  // redisSetTimeout, redisCommand (AuthRedisStore)

#include <algorithm>
#include <cstring>  // memcpy
#include <filesystem>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include <fmt/ranges.h>  // fmt::join

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "base/bf16.h"
#include "base/clock.h"  // SteadyClock
#include "base/redis_ping.h"  // redis_ping

namespace ms {
namespace {

using Clock = SteadyClock;
using std::chrono::milliseconds;

#define MS_COMM_FAIL(...) \
  throw ::ms::CommError(::fmt::format("{}:{}: {}", __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)))

// ---------------------------------------------------------------------------------------------
// Stores

struct StoreAddress {
  bool redis = false;
  std::string path;  // file store folder
  std::string host;  // redis
  int port = 6379;
};

StoreAddress parse_store(const std::string& s) {
  StoreAddress a;
  if (s.rfind("file:", 0) == 0) {
    a.path = s.substr(5);
    if (a.path.rfind("//", 0) == 0) a.path = a.path.substr(2);  // file:///dir
    MS_CHECK(!a.path.empty(), "store '{}': empty folder (want file:/dir)", s);
    return a;
  }
  if (s.rfind("redis://", 0) == 0) {
    a.redis = true;
    std::string hp = s.substr(8);
    if (!hp.empty() && hp.back() == '/') hp.pop_back();
    const size_t colon = hp.rfind(':');
    a.host = hp.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string p = hp.substr(colon + 1);
      char* end = nullptr;
      const long v = std::strtol(p.c_str(), &end, 10);
      MS_CHECK(!p.empty() && *end == 0 && v > 0 && v < 65536, "store '{}': bad port '{}'", s, p);
      a.port = static_cast<int>(v);
    }
    MS_CHECK(!a.host.empty(), "store '{}': no host (want redis://host:port)", s);
    return a;
  }
  MS_FAIL("rendezvous store '{}' is neither file:/dir nor redis://host:port (MEGASCALE_STORE)", s.empty() ? "" : s);
}

// Checks that a Redis server answers at host:port before Gloo's RedisStore connects (its
// connect has no timeout): base/redis_ping.h, retried while nothing accepts a connection, until
// `limit` (each try given the time left, at least 1 s; a connected server at least 1 s to answer).
// Throws a CommError naming the address when nothing accepts a connection within `limit`, when the
// name does not resolve, or with the server's answer when AUTH or PING is refused (e.g. NOAUTH).
void probe_redis(const std::string& host, int port, const std::string& password, milliseconds limit,
                 const std::string& what) {
  const auto deadline = Clock::now() + limit;
  std::string last = "no address";
  for (;;) {
    const auto left = std::max<int64_t>(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count(), 1000);
    const RedisPing p = redis_ping(host, port, password, milliseconds(left));
    switch (p.result) {
      case RedisPing::Result::kOk: return;
      case RedisPing::Result::kUnresolvable:
        MS_COMM_FAIL("rendezvous store {} is unreachable: cannot resolve '{}': {}", what, host, p.reason);
      case RedisPing::Result::kNoAnswer:
        MS_COMM_FAIL("rendezvous store {}: no answer to {}: {}", what, p.command, p.reason);
      case RedisPing::Result::kRefused:
        MS_COMM_FAIL("rendezvous store {} refused {}: {}", what, p.command, p.reason);
      case RedisPing::Result::kNoConnection:
        break;
    }
    last = p.reason;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  MS_COMM_FAIL("rendezvous store {} is unreachable: no TCP connection within {} ms ({})", what, limit.count(), last);
}

// A store several comm threads may use at once: groups are connected on their parent's thread, so
// two parents' threads may rendezvous at the same time, and neither FileStore (its key list) nor
// RedisStore (one hiredis connection) is thread-safe. Every call into Base holds a mutex; wait()
// polls Base::check() with the mutex released in between, so one group's rendezvous never holds up
// another's (holding it through a wait could make two ranks wait on each other in a cycle).
template <class Base>
class SerializedStore : public Base {
 public:
  using Base::Base;
  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard lk(m_);
    Base::set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, gloo::rendezvous::Store::kDefaultTimeout);  // Base::get may wait on its own: not under m_
    std::lock_guard lk(m_);
    return Base::get(key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, gloo::rendezvous::Store::kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard lk(m_);
        if (Base::check(keys)) return;
      }
      if (timeout != gloo::kNoTimeout && Clock::now() >= deadline)
        throw gloo::IoException(fmt::format("Wait timeout for key(s): {} after {} ms", fmt::join(keys, ", "),
                                            timeout.count()));
      std::this_thread::sleep_for(milliseconds(10));
    }
  }

 protected:
  std::recursive_mutex m_;  // recursive: Base's calls may come back through the overrides
};

// RedisStore with AUTH on its connection and a socket timeout on every command.
class AuthRedisStore : public SerializedStore<gloo::rendezvous::RedisStore> {
 public:
  AuthRedisStore(const std::string& host, int port, const std::string& password, milliseconds timeout)
      : SerializedStore(host, port) {
    timeval tv{};
    tv.tv_sec = timeout.count() / 1000;
    tv.tv_usec = (timeout.count() % 1000) * 1000;
    redisSetTimeout(redis_, tv);
    if (password.empty()) return;
    auto* r = static_cast<redisReply*>(redisCommand(redis_, "AUTH %s", password.c_str()));
    MS_CHECK(r, "redis AUTH: {}", redis_->errstr);
    const std::string err = r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len) : "";
    freeReplyObject(r);
    MS_CHECK(err.empty(), "redis AUTH refused: {}", err);
  }
};

// The rendezvous store env.store names (its folder created, a Redis server probed first).
std::unique_ptr<gloo::rendezvous::Store> open_store(const CommEnv& env) {
  const StoreAddress addr = parse_store(env.store);
  if (addr.redis) {
    probe_redis(addr.host, addr.port, env.store_password, std::min(env.timeout, milliseconds(5000)), env.store);
    try {
      return std::make_unique<AuthRedisStore>(addr.host, addr.port, env.store_password, env.timeout);
    } catch (const std::exception& e) {
      MS_COMM_FAIL("rendezvous store {}: {}", env.store, e.what());
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(addr.path, ec);
  MS_CHECK(!ec && std::filesystem::is_directory(addr.path), "rendezvous store {}: cannot create folder '{}': {}",
           env.store, addr.path, ec.message());
  return std::make_unique<SerializedStore<gloo::rendezvous::FileStore>>(addr.path);
}

// What every group of one world shares: the store (keys under the run id) and the TCP device.
// Written once by create_world before any group's thread runs; afterwards the groups' threads use
// it at the same time: the store is a SerializedStore (PrefixStore only forwards), and
// tcp::Device is made for several contexts driven from several threads (its own event loop thread
// and locks).
struct GlooShared {
  std::string store_name;  // for messages
  std::unique_ptr<gloo::rendezvous::Store> base;
  std::unique_ptr<gloo::rendezvous::PrefixStore> run;
  std::shared_ptr<gloo::transport::Device> device;
};

std::vector<char> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// ---------------------------------------------------------------------------------------------
// Reduction of n contributions in rank order 0..n-1, block by block (out may alias a contribution
// at the same offsets: a block is read completely before it is written).

template <class Combine>
void reduce_blocks(void* out, const std::vector<const void*>& src, size_t len, DType t, Combine combine) {
  constexpr size_t kBlock = 2048;
  float acc[kBlock];
  for (size_t b = 0; b < len; b += kBlock) {
    const size_t m = std::min(kBlock, len - b);
    if (t == DType::kF32) {
      std::memcpy(acc, static_cast<const float*>(src[0]) + b, m * 4);
      for (size_t r = 1; r < src.size(); r++) {
        const float* s = static_cast<const float*>(src[r]) + b;
        for (size_t k = 0; k < m; k++) acc[k] = combine(acc[k], s[k]);
      }
      std::memcpy(static_cast<float*>(out) + b, acc, m * 4);
    } else {
      const bf16_t* s0 = static_cast<const bf16_t*>(src[0]) + b;
      for (size_t k = 0; k < m; k++) acc[k] = bf16_to_f32(s0[k]);
      for (size_t r = 1; r < src.size(); r++) {
        const bf16_t* s = static_cast<const bf16_t*>(src[r]) + b;
        for (size_t k = 0; k < m; k++) acc[k] = bf16_to_f32(f32_to_bf16_rne(combine(acc[k], bf16_to_f32(s[k]))));
      }
      bf16_t* o = static_cast<bf16_t*>(out) + b;
      for (size_t k = 0; k < m; k++) o[k] = f32_to_bf16_rne(acc[k]);
    }
  }
}

void reduce_contributions(void* out, const std::vector<const void*>& src, size_t len, DType t, ReduceOp op) {
  if (op == ReduceOp::kSum) reduce_blocks(out, src, len, t, [](float a, float b) { return a + b; });
  else reduce_blocks(out, src, len, t, [](float a, float b) { return b > a ? b : a; });
}

// ---------------------------------------------------------------------------------------------

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<GlooShared> shared, std::string key, std::string name, int rank,
                   std::vector<int> world_ranks, milliseconds timeout)
      : shared_(std::move(shared)), key_(std::move(key)) {
    set_identity(std::move(name), rank, std::move(world_ranks), timeout);
  }

  ~GlooCommunicator() override {
    drain();  // afterwards no op of this group runs: ctx_ is the caller's
    ctx_.reset();
  }

  // Connects this group's members to each other: on the parent's thread (new_group), or on the
  // caller's for the world, before this group has a thread. A group of one needs nothing.
  void connect() {
    if (size_ == 1) return;
    gloo::rendezvous::PrefixStore store(key_, *shared_->run);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank_, size_);
    ctx->setTimeout(timeout_);
    try {
      ctx->connectFullMesh(store, shared_->device);
    } catch (const std::exception& e) {
      MS_COMM_FAIL("rendezvous of group '{}' (rank {} of {}) through store {} failed within {} ms: {}", name_, rank_,
                   size_, shared_->store_name, timeout_.count(), e.what());
    }
    ctx_ = std::move(ctx);
  }

  std::unique_ptr<Communicator> make_group(const std::vector<int>& members, const std::string& name) override {
    return make_child(members, name, [&](int me, const std::vector<int>& wr) {
      // Keys: parent key / name / members / k-th group of that name and member list, so two
      // groups never share keys even when a name repeats.
      const std::string id = name + "/" + fmt::format("{}", fmt::join(members, ","));
      const int k = children_[id]++;
      auto child = std::make_unique<GlooCommunicator>(shared_, fmt::format("{}/{}#{}", key_, id, k), name, me, wr,
                                                      timeout_);
      child->connect();
      return child;
    });
  }

  void connect_world(const CommEnv& env);
  static std::unique_ptr<Communicator> create_world(const CommEnv& env);

 protected:
  const char* backend_name() const override { return "gloo"; }

  void execute(Op& op) override {
    const size_t es = dtype_size(op.dtype);
    const uint64_t slot = op.seq << 4;
    switch (op.kind) {
      case OpKind::kAllReduce: {
        const auto offs = chunks(op.count, size_);
        char* buf = static_cast<char*>(op.out);
        reduce_scatter_v(op, buf, buf + offs[rank_] * es, offs, slot | 1);
        all_gather_v(op, buf + offs[rank_] * es, buf, offs, slot | 2);
        break;
      }
      case OpKind::kReduceScatter:
        reduce_scatter_v(op, op.in, op.out, equal(op.count, size_), slot | 1);
        break;
      case OpKind::kAllGather:
        all_gather_v(op, op.in, op.out, equal(op.count, size_), slot | 2);
        break;
      case OpKind::kBroadcast: {
        std::vector<Xfer> rx, tx;
        const size_t bytes = op.count * es;
        if (rank_ == op.peer) {
          for (int p = 0; p < size_; p++)
            if (p != rank_) tx.push_back({p, op.out, bytes});
        } else {
          rx.push_back({op.peer, op.out, bytes});
        }
        exchange(op, slot | 3, rx, tx);
        break;
      }
      case OpKind::kBarrier: {
        // Every rank sends one byte to every other: nobody leaves before everybody arrived.
        std::vector<char> tokens(size_, 0);
        char token = 1;
        std::vector<Xfer> rx, tx;
        for (int p = 0; p < size_; p++)
          if (p != rank_) rx.push_back({p, &tokens[p], 1}), tx.push_back({p, &token, 1});
        exchange(op, slot | 4, rx, tx);
        break;
      }
      case OpKind::kSend:
      case OpKind::kRecv:
        break;  // zero bytes (post() takes the others): nothing to move
    }
  }

  // Send/recv are posted (non-blocking) and completed later, see Communicator::post.
  bool post(Op& op) override {
    if ((op.kind != OpKind::kSend && op.kind != OpKind::kRecv) || op.count == 0) return false;
    // Slot from (tag, pair): a send matches the recv with the same tag between the same two ranks,
    // in order. Bit 63 keeps these apart from the collectives' slots (seq << 4 | phase).
    const uint64_t lo = std::min(rank_, op.peer) & 0xfff, hi = std::max(rank_, op.peer) & 0xfff;
    const uint64_t slot = (1ull << 63) | (uint64_t(op.tag) << 24) | (lo << 12) | hi;
    const bool send = op.kind == OpKind::kSend;
    Failure f;
    try {
      std::shared_ptr<gloo::transport::UnboundBuffer> b =
          ctx_->createUnboundBuffer(send ? const_cast<void*>(op.in) : op.out, op.count);
      if (send) b->send(op.peer, slot);
      else b->recv(op.peer, slot);
      op.handle = std::move(b);
    } catch (...) {
      f.note(op, op.peer, timeout_);
    }
    f.rethrow(op);
    return true;
  }

  void complete(Op& op) override {
    Failure f;
    try {
      wait(op, *static_cast<gloo::transport::UnboundBuffer*>(op.handle.get()), op.peer, op.kind == OpKind::kRecv);
    } catch (...) {
      f.note(op, op.peer, timeout_);
    }
    f.rethrow(op);
  }

 private:
  struct Xfer {
    int peer;
    void* ptr;
    size_t bytes;
  };

  // Element offsets of n near-equal chunks of count (chunk j = [offs[j], offs[j+1])).
  static std::vector<size_t> chunks(size_t count, int n) {
    std::vector<size_t> offs(n + 1);
    for (int j = 0; j <= n; j++) offs[j] = static_cast<size_t>((unsigned __int128)count * j / n);
    return offs;
  }
  static std::vector<size_t> equal(size_t shard, int n) {
    std::vector<size_t> offs(n + 1);
    for (int j = 0; j <= n; j++) offs[j] = shard * j;
    return offs;
  }

  // in holds every chunk (offs, elements); out gets this rank's chunk reduced over the group.
  void reduce_scatter_v(Op& op, const void* in, void* out, const std::vector<size_t>& offs, uint64_t slot) {
    const size_t es = dtype_size(op.dtype);
    const size_t len = offs[rank_ + 1] - offs[rank_];
    const char* src = static_cast<const char*>(in);
    if (scratch_.size() < (size_ - 1) * len * es) scratch_.resize((size_ - 1) * len * es);
    std::vector<const void*> contrib(size_);
    std::vector<Xfer> rx, tx;
    for (int p = 0, i = 0; p < size_; p++) {
      if (p == rank_) {
        contrib[p] = src + offs[p] * es;
        continue;
      }
      char* r = scratch_.data() + (i++) * len * es;
      contrib[p] = r;
      rx.push_back({p, r, len * es});
      tx.push_back({p, const_cast<char*>(src) + offs[p] * es, (offs[p + 1] - offs[p]) * es});
    }
    exchange(op, slot, rx, tx);
    if (len) reduce_contributions(out, contrib, len, op.dtype, op.reduce);
  }

  // in is this rank's chunk; out gets every chunk at its offset (in may be out + offs[rank]).
  void all_gather_v(Op& op, const void* in, void* out, const std::vector<size_t>& offs, uint64_t slot) {
    const size_t es = dtype_size(op.dtype);
    const size_t len = offs[rank_ + 1] - offs[rank_];
    char* dst = static_cast<char*>(out);
    std::vector<Xfer> rx, tx;
    for (int p = 0; p < size_; p++) {
      if (p == rank_) continue;
      rx.push_back({p, dst + offs[p] * es, (offs[p + 1] - offs[p]) * es});
      tx.push_back({p, const_cast<void*>(in), len * es});
    }
    exchange(op, slot, rx, tx);
    if (len && in != dst + offs[rank_] * es) std::memcpy(dst + offs[rank_] * es, in, len * es);
  }

  // Posts every recv, then every send, then waits for the recvs and the sends in list order, each
  // wait bounded by the op deadline. Zero-byte transfers are skipped (both ends agree on sizes).
  // When one peer fails, the transfers with the others still complete before the op fails: a
  // healthy peer then gets its data from us and goes on to notice the failed peer itself, instead
  // of blaming us when we give up. (Destroying a Gloo buffer with a transfer still pending is safe:
  // Gloo holds buffers through weak pointers.)
  void exchange(Op& op, uint64_t slot, const std::vector<Xfer>& rx, const std::vector<Xfer>& tx) {
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> rb, tb;
    std::vector<int> rp, tp;
    Failure first;
    auto guard = [&](int peer, auto&& fn) {
      if (first.timed_out) return;  // Gloo has closed every connection of the group
      try {
        fn();
      } catch (...) {
        first.note(op, peer, timeout_);
      }
    };
    for (const Xfer& x : rx) {
      if (!x.bytes) continue;
      guard(x.peer, [&] {
        auto b = ctx_->createUnboundBuffer(x.ptr, x.bytes);
        b->recv(x.peer, slot);
        rb.push_back(std::move(b));
        rp.push_back(x.peer);
      });
    }
    for (const Xfer& x : tx) {
      if (!x.bytes) continue;
      guard(x.peer, [&] {
        auto b = ctx_->createUnboundBuffer(x.ptr, x.bytes);
        b->send(x.peer, slot);
        tb.push_back(std::move(b));
        tp.push_back(x.peer);
      });
    }
    for (size_t i = 0; i < rb.size(); i++) guard(rp[i], [&] { wait(op, *rb[i], rp[i], true); });
    for (size_t i = 0; i < tb.size(); i++) guard(tp[i], [&] { wait(op, *tb[i], tp[i], false); });
    first.rethrow(op);
  }

  // The first failure of an op: which peer, and the error with a clearer lead (a timeout, when the
  // op deadline has passed, or a connection failure); comm.cpp adds op, group, seq and the peer.
  struct Failure {
    std::exception_ptr error;
    int peer = -1;
    bool timed_out = false;
    void note(const Op& op, int p, milliseconds timeout) {
      if (error) return;
      peer = p;
      try {
        throw;
      } catch (const gloo::IoException& e) {
        timed_out = Clock::now() >= op.deadline;
        error = std::make_exception_ptr(std::runtime_error(
            timed_out ? fmt::format("timed out after {} ms: {}", timeout.count(), e.what())
                      : fmt::format("connection failed: {}", e.what())));
      } catch (...) {
        error = std::current_exception();
      }
    }
    void rethrow(Op& op) const {
      if (!error) return;
      op.waiting_on = peer;
      std::rethrow_exception(error);
    }
  };

  void wait(Op& op, gloo::transport::UnboundBuffer& b, int peer, bool recv) {
    op.waiting_on = peer;
    auto left = std::chrono::duration_cast<milliseconds>(op.deadline - Clock::now());
    if (left < milliseconds(1)) left = milliseconds(1);
    const bool ok = recv ? b.waitRecv(nullptr, left) : b.waitSend(nullptr, left);
    if (!ok) throw std::runtime_error(fmt::format("{} aborted", recv ? "recv" : "send"));
    op.waiting_on = -1;
  }

  std::shared_ptr<GlooShared> shared_;
  std::string key_;                               // store prefix of this group's rendezvous
  std::shared_ptr<gloo::rendezvous::Context> ctx_;  // null for a group of one
  std::map<std::string, int> children_;           // groups created per (name, members), this group's thread only
  std::vector<char> scratch_;                     // reduce-scatter receive space, this group's thread only
};

void GlooCommunicator::connect_world(const CommEnv& env) {
  // Every rank checks the world size against rank 0's before connecting, so a mismatch is a
  // clear error instead of a rendezvous that never completes.
  const std::string key = "megascale/world_size";
  try {
    if (rank_ == 0) shared_->run->set(key, to_bytes(std::to_string(size_)));
    shared_->run->wait({key}, timeout_);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::string hint;
    if (what.find("NOAUTH") != std::string::npos) hint = " (the store wants a password: MEGASCALE_STORE_PASSWORD)";
    else if (what.find("already") != std::string::npos || what.find("exists") != std::string::npos)
      hint = " (the store already holds this run's keys: use a fresh MEGASCALE_RUN_ID or store)";
    MS_COMM_FAIL("rendezvous through store {} (run '{}', rank {} of {}) failed within {} ms: {}{}",
                 shared_->store_name, env.run_id, rank_, size_, timeout_.count(), what, hint);
  }
  const auto v = shared_->run->get(key);
  const std::string got(v.begin(), v.end());
  MS_CHECK(got == std::to_string(size_), "rendezvous through store {}: rank 0 has world size {} but rank {} has {}",
           shared_->store_name, got, rank_, size_);
  connect();
}

std::unique_ptr<Communicator> GlooCommunicator::create_world(const CommEnv& env) {
  MS_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, "gloo: rank {} of world size {}",
           env.rank, env.world_size);
  MS_CHECK(!env.store.empty() || env.world_size == 1,
           "gloo with {} ranks needs a rendezvous store: set MEGASCALE_STORE to file:/dir or redis://host:port",
           env.world_size);
  std::vector<int> world(env.world_size);
  for (int r = 0; r < env.world_size; r++) world[r] = r;
  auto shared = std::make_shared<GlooShared>();
  shared->store_name = env.store.empty() ? "(none)" : env.store;
  if (env.world_size == 1 && env.store.empty()) {
    auto comm = std::make_unique<GlooCommunicator>(shared, "world", "world", 0, world, env.timeout);
    return comm;
  }
  // Gloo writes to sockets without MSG_NOSIGNAL: a peer that dies mid-write would kill this
  // process with SIGPIPE instead of failing the op. Ignore it unless the program handles it.
  struct sigaction old_action {};
  if (sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<GlooCommunicator> comm;
  {  // on the caller's thread: no group (and so no comm thread) uses `shared` yet
    shared->base = open_store(env);
    shared->run = std::make_unique<gloo::rendezvous::PrefixStore>(env.run_id, *shared->base);
    gloo::transport::tcp::attr attr;
    attr.hostname = env.hostname;
    try {
      shared->device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      MS_FAIL("gloo: cannot bind the TCP transport to '{}' (MEGASCALE_HOST): {}", env.hostname, e.what());
    }
    comm = std::make_unique<GlooCommunicator>(shared, "world", "world", env.rank, world, env.timeout);
    comm->connect_world(env);
  }
  return comm;
}

}  // namespace

std::unique_ptr<Communicator> make_gloo_world(const CommEnv& env) { return GlooCommunicator::create_world(env); }

std::vector<char> store_share(const CommEnv& env, const std::string& key, const std::vector<char>& value, bool root) {
  MS_CHECK(!env.store.empty(), "rendezvous of {} ranks needs a store: set MEGASCALE_STORE to file:/dir or "
           "redis://host:port", env.world_size);
  const std::unique_ptr<gloo::rendezvous::Store> base = open_store(env);
  gloo::rendezvous::PrefixStore run(env.run_id, *base);
  try {
    if (root) run.set(key, value);
    run.wait({key}, env.timeout);
    return run.get(key);
  } catch (const std::exception& e) {
    MS_COMM_FAIL("rendezvous through store {} (run '{}', key '{}', rank {} of {}) failed within {} ms: {}", env.store,
                 env.run_id, key, env.rank, env.world_size, env.timeout.count(), e.what());
  }
}

}  // namespace ms
