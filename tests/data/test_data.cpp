// Tests of the data path: llm.c shards and Megatron indexed datasets (byte-identical to independent
// numpy writers run with /usr/bin/python3; read back exactly; every malformed variant rejected up
// front with the file and the reason), and the DataLoader (natural order equals the reference
// sample list, every sample once per epoch, order independent of B, prefetch == synchronous,
// exact resume, path expansion and its errors).
#include <gtest/gtest.h>

#include "common/test_util.h"

#include <cstdlib>     // std::system
#include <cstring>     // std::memcpy
#include <filesystem>  // std::filesystem
#include <fstream>     // std::ifstream, std::ofstream
#include <map>         // std::map
#include <sstream>     // std::stringstream
#include <string>
#include <unistd.h>    // getpid
#include <vector>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "data/dataloader.h"
#include "data/megatron_dataset.h"
#include "data/token_shard.h"

using ms::testing::expect_error;

namespace fs = std::filesystem;
using ms::DataLoader;

namespace {

using ms::testing::slurp;
using ms::testing::spit;

using Rng = ms::testing::TestRng;

constexpr int kV = 50257;



std::vector<uint16_t> random_tokens(Rng& rng, size_t n, int vocab = kV) {
  std::vector<uint16_t> t(n);
  for (auto& x : t) x = static_cast<uint16_t>(rng.next() % vocab);
  return t;
}

class DataTest : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_data"; }

  // Runs a Python script with /usr/bin/python3 (numpy) and one argument; fails on a non-zero exit.
  void python(const std::string& code, const std::string& arg) {
    std::string script = path("script.py");
    spit(script, code);
    std::string cmd = "/usr/bin/python3 '" + script + "' '" + arg + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
};

// Independent Megatron writer (numpy) following the MMIDIDX layout.
const char* kPyMegatron = R"PY(
import json, struct, sys
import numpy as np
spec = json.load(open(sys.argv[1]))
codes = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}
dt = np.dtype(codes[spec["dtype"]])
seqs = [np.array(s, dtype=dt) for s in spec["sequences"]]
with open(spec["prefix"] + ".bin", "wb") as f:
    for s in seqs:
        f.write(s.tobytes())
lengths = np.array([len(s) for s in seqs], dtype=np.int32)
pointers = np.zeros(len(seqs), dtype=np.int64)
if len(seqs) > 1:
    pointers[1:] = np.cumsum(lengths.astype(np.int64) * dt.itemsize)[:-1]
doc_idx = np.array(spec["doc_idx"], dtype=np.int64)
with open(spec["prefix"] + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00")
    f.write(struct.pack("<Q", 1))
    f.write(struct.pack("<B", spec["dtype"]))
    f.write(struct.pack("<Q", len(seqs)))
    f.write(struct.pack("<Q", len(doc_idx)))
    f.write(lengths.tobytes())
    f.write(pointers.tobytes())
    f.write(doc_idx.tobytes())
)PY";

// Independent llm.c shard writer (numpy), as in llm.c's dev/data/data_common.py.
const char* kPyShard = R"PY(
import json, sys
import numpy as np
spec = json.load(open(sys.argv[1]))
header = np.zeros(256, dtype=np.int32)
header[0] = 20240520
header[1] = 1
header[2] = len(spec["tokens"])
with open(spec["path"], "wb") as f:
    f.write(header.tobytes())
    f.write(np.array(spec["tokens"], dtype=np.uint16).tobytes())
)PY";

}  // namespace

// ---------------------------------------------------------------------------------------------
// llm.c shards

TEST_F(DataTest, ShardWriterMatchesNumpyAndReadsBack) {
  Rng rng{1};
  auto toks = random_tokens(rng, 777);
  ms::write_token_shard(path("cpp.bin"), toks);
  spit(path("spec.json"), nlohmann::json{{"path", path("py.bin")}, {"tokens", toks}}.dump());
  python(kPyShard, path("spec.json"));
  EXPECT_EQ(slurp(path("cpp.bin")), slurp(path("py.bin")));
  EXPECT_EQ(fs::file_size(path("cpp.bin")), 1024u + 2 * 777);
  ms::TokenShard s(path("py.bin"));
  s.validate(kV);
  ASSERT_EQ(s.num_tokens(), 777u);
  EXPECT_EQ(std::vector<uint16_t>(s.tokens(), s.tokens() + 777), toks);
  EXPECT_TRUE(ms::has_token_shard_magic(path("py.bin")));
  // No temporary file is left behind.
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST_F(DataTest, BadShardsAreNamedErrors) {
  Rng rng{2};
  auto toks = random_tokens(rng, 1000);
  std::string good = path("good.bin");
  ms::write_token_shard(good, toks);
  std::string bytes = slurp(good);
  auto with_int = [&](size_t at, int32_t v) {
    std::string b = bytes;
    std::memcpy(b.data() + at, &v, 4);
    return b;
  };
  std::string p = path("train_000.bin");
  spit(p, with_int(0, 12345));
  expect_error([&] { ms::TokenShard s(p); }, {p, "bad magic 12345 (expected 20240520"});
  spit(p, with_int(4, 7));
  expect_error([&] { ms::TokenShard s(p); }, {p, "version 7"});
  spit(p, bytes.substr(0, 1500));
  expect_error([&] { ms::TokenShard s(p); },
               {p, "truncated: header says 1000 tokens (3024 bytes) but file has 1500 bytes"});
  spit(p, bytes + "xx");
  expect_error([&] { ms::TokenShard s(p); }, {p, "header says 1000 tokens (3024 bytes) but file has 3026 bytes"});
  spit(p, bytes.substr(0, 100));
  expect_error([&] { ms::TokenShard s(p); }, {p, "truncated", "100 bytes"});
  spit(p, with_int(8, 0).substr(0, 1024));
  expect_error([&] { ms::TokenShard s(p); }, {p, "header says 0 tokens"});
  std::string b = bytes;
  uint16_t big = 50300;
  std::memcpy(b.data() + 1024 + 2 * 17, &big, 2);
  spit(p, b);
  ms::TokenShard s(p);  // structure is fine
  expect_error([&] { s.validate(kV); }, {p, "token id 50300 at position 17 >= vocab size 50257"});
  // The loader validates in its constructor, before any batch.
  expect_error([&] { DataLoader dl({p}, 2, 8, kV, 1, true, "data.train"); },
               {p, "token id 50300 at position 17"});
  expect_error([&] { ms::TokenShard s2(path("missing.bin")); }, {path("missing.bin"), "cannot open"});
}

// ---------------------------------------------------------------------------------------------
// Megatron indexed datasets

TEST_F(DataTest, MegatronWriterMatchesNumpyAndReadsBack) {
  Rng rng{3};
  for (auto dtype : {ms::DType::kU16, ms::DType::kI32, ms::DType::kI64, ms::DType::kU8}) {
    int vocab = dtype == ms::DType::kU8 ? 256 : kV;
    // 4 documents of 1, 3, 1, 2 sequences (one empty sequence included).
    std::vector<std::vector<int64_t>> seqs;
    std::vector<int64_t> doc_idx{0};
    const int per_doc[] = {1, 3, 1, 2};
    for (int d = 0; d < 4; ++d) {
      for (int k = 0; k < per_doc[d]; ++k) {
        size_t n = (d == 1 && k == 1) ? 0 : 1 + rng.next() % 40;
        std::vector<int64_t> s(n);
        for (auto& x : s) x = static_cast<int64_t>(rng.next() % vocab);
        seqs.push_back(s);
      }
      doc_idx.push_back(static_cast<int64_t>(seqs.size()));
    }
    std::string name = std::string("m_") + ms::dtype_name(dtype);
    ms::MegatronWriter w(path(name + "_cpp"), dtype);
    size_t si = 0;
    for (int d = 0; d < 4; ++d) {
      for (int k = 0; k < per_doc[d]; ++k) w.add_sequence(seqs[si++]);
      w.end_document();
    }
    w.finalize();
    spit(path("spec.json"), nlohmann::json{{"prefix", path(name + "_py")},
                                            {"dtype", static_cast<int>(ms::megatron_dtype_code(dtype))},
                                            {"sequences", seqs},
                                            {"doc_idx", doc_idx}}.dump());
    python(kPyMegatron, path("spec.json"));
    EXPECT_EQ(slurp(path(name + "_cpp.idx")), slurp(path(name + "_py.idx"))) << name;
    EXPECT_EQ(slurp(path(name + "_cpp.bin")), slurp(path(name + "_py.bin"))) << name;

    ms::MegatronDataset ds(path(name + "_py"));
    ds.validate(vocab);
    EXPECT_EQ(ds.dtype(), dtype);
    ASSERT_EQ(ds.num_sequences(), seqs.size());
    ASSERT_EQ(ds.num_documents(), 4u);
    std::vector<int64_t> stream;
    for (size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_EQ(ds.sequence(i), seqs[i]);
      stream.insert(stream.end(), seqs[i].begin(), seqs[i].end());
    }
    for (int d = 0; d < 4; ++d) {
      std::vector<int64_t> want;
      for (int64_t s = doc_idx[d]; s < doc_idx[d + 1]; ++s)
        want.insert(want.end(), seqs[s].begin(), seqs[s].end());
      EXPECT_EQ(ds.document(d), want);
    }
    ASSERT_EQ(ds.num_tokens(), stream.size());
    std::vector<int> got(stream.size());
    ds.read_tokens(0, stream.size(), got.data());
    for (size_t i = 0; i < stream.size(); ++i) ASSERT_EQ(got[i], stream[i]);
    // ".bin" / ".idx" suffixes name the same dataset.
    EXPECT_EQ(ms::MegatronDataset(path(name + "_py.bin")).num_tokens(), stream.size());
  }
}

TEST_F(DataTest, BadMegatronDatasetsAreNamedErrors) {
  Rng rng{4};
  std::vector<std::vector<int64_t>> docs;
  for (int d = 0; d < 5; ++d) {
    std::vector<int64_t> s(10 + d);
    for (auto& x : s) x = static_cast<int64_t>(rng.next() % kV);
    docs.push_back(s);
  }
  ms::write_megatron_dataset(path("good"), docs);  // 5 sequences, 6 doc indices, uint16
  const std::string idx = slurp(path("good.idx")), bin = slurp(path("good.bin"));
  const std::string ip = path("bad.idx"), bp = path("bad.bin");
  auto patch = [&](std::string s, size_t at, const void* v, size_t n) {
    std::memcpy(s.data() + at, v, n);
    return s;
  };
  auto open = [&] { ms::MegatronDataset ds(path("bad")); ds.validate(kV); };
  const size_t N = 5, D = 6, kLen = 34, kPtr = 34 + 4 * N, kDoc = 34 + 12 * N;

  spit(bp, bin);
  spit(ip, patch(idx, 0, "XXIDIDX", 7));
  expect_error(open, {ip, "bad magic"});
  uint64_t two = 2;
  spit(ip, patch(idx, 9, &two, 8));
  expect_error(open, {ip, "unsupported version 2"});
  uint8_t code = 9;
  spit(ip, patch(idx, 17, &code, 1));
  expect_error(open, {ip, "unknown dtype code 9"});
  code = 0;
  spit(ip, patch(idx, 17, &code, 1));
  expect_error(open, {ip, "unknown dtype code 0"});
  code = 7;
  spit(ip, patch(idx, 17, &code, 1));
  expect_error(open, {ip, "dtype fp32 (Megatron code 7) cannot hold token ids"});
  code = 6;
  spit(ip, patch(idx, 17, &code, 1));
  expect_error(open, {ip, "dtype fp64 (Megatron code 6) cannot hold token ids"});
  // The writer refuses types that cannot hold token ids, also those without a Megatron code.
  for (ms::DType t : {ms::DType::kF32, ms::DType::kF64, ms::DType::kBF16, ms::DType::kF16})
    expect_error([&] { ms::MegatronWriter w(path("w_bad"), t); }, {"w_bad", ms::dtype_name(t), "cannot hold token ids"});
  spit(ip, idx.substr(0, idx.size() - 8));
  expect_error(open, {ip, "size mismatch"});
  uint64_t many = 1ull << 40;
  spit(ip, patch(idx, 18, &many, 8));
  expect_error(open, {ip, "size mismatch"});
  spit(ip, idx.substr(0, 20));
  expect_error(open, {ip, "truncated"});
  int64_t far = 1 << 20;
  spit(ip, patch(idx, kPtr + 8 * 2, &far, 8));
  expect_error(open, {ip, "sequence 2", "runs past the end of", bp});
  int64_t off = 2;
  spit(ip, patch(idx, kPtr + 8 * 3, &off, 8));
  expect_error(open, {ip, "sequence 3 pointer 2 is not the end of the previous sequence"});
  int32_t neg = -1;
  spit(ip, patch(idx, kLen + 4, &neg, 4));
  expect_error(open, {ip, "sequence 1 has negative length -1"});
  int64_t back = 1;
  spit(ip, patch(patch(idx, kDoc + 8 * 2, &back, 8), kDoc + 8 * 1, &two, 8));
  expect_error(open, {ip, "not monotonic"});
  int64_t last = 4;
  spit(ip, patch(idx, kDoc + 8 * (D - 1), &last, 8));
  expect_error(open, {ip, "last document index is 4 but there are 5 sequences"});
  // .bin truncated / with extra bytes.
  spit(ip, idx);
  spit(bp, bin.substr(0, bin.size() - 3));
  expect_error(open, {ip, "runs past the end of", bp, "truncated"});
  spit(bp, bin + "ab");
  expect_error(open, {bp, "size mismatch"});
  // Token id out of range: sequence 2, offset 4.
  uint16_t big = 50300;
  size_t at = 2 * (docs[0].size() + docs[1].size() + 4);
  spit(bp, patch(bin, at, &big, 2));
  expect_error(open, {bp, "token id 50300 at position", "(sequence 2, offset 4) >= vocab size 50257"});
  // Missing .bin.
  fs::remove(bp);
  expect_error([&] { ms::MegatronDataset ds(path("bad")); }, {bp, "cannot open"});
}

// ---------------------------------------------------------------------------------------------
// DataLoader

namespace {

struct Fixture {
  std::vector<std::string> paths;
  std::vector<std::vector<int>> samples;  // reference: sample id -> T+1 tokens
};

// Four sources: two llm.c shards, a uint16 and an int32 Megatron dataset (multi-document), of
// lengths chosen so that the tails (not a whole sample) are dropped.
Fixture make_sources(const fs::path& dir, int T, uint64_t seed) {
  Rng rng{seed};
  Fixture fx;
  std::vector<std::vector<int>> streams;
  auto add_stream = [&](const std::vector<int>& s) {
    streams.push_back(s);
    for (size_t k = 0; k * T + T + 1 <= s.size(); ++k)
      fx.samples.emplace_back(s.begin() + k * T, s.begin() + k * T + T + 1);
  };
  for (auto [name, n] : {std::pair<const char*, size_t>{"a_shard.bin", 1000}, {"b_shard.bin", 517}}) {
    auto t = random_tokens(rng, n);
    ms::write_token_shard((dir / name).string(), t);
    fx.paths.push_back((dir / name).string());
    add_stream(std::vector<int>(t.begin(), t.end()));
  }
  for (auto [name, dt] : {std::pair<const char*, ms::DType>{"c_meg", ms::DType::kU16}, {"d_meg", ms::DType::kI32}}) {
    std::vector<std::vector<int64_t>> docs;
    std::vector<int> stream;
    for (int d = 0; d < 3; ++d) {
      std::vector<int64_t> doc(200 + 37 * d);
      for (auto& x : doc) x = static_cast<int64_t>(rng.next() % kV);
      stream.insert(stream.end(), doc.begin(), doc.end());
      docs.push_back(doc);
    }
    ms::write_megatron_dataset((dir / name).string(), docs, dt);
    fx.paths.push_back((dir / name).string() + ".bin");
    add_stream(stream);
  }
  return fx;
}

// The next `count` samples (each T+1 tokens) from the loader, batch by batch.
std::vector<std::vector<int>> take(DataLoader& dl, size_t batches) {
  const int B = dl.B(), T = dl.T();
  std::vector<int> in(static_cast<size_t>(B) * T), tg(static_cast<size_t>(B) * T);
  std::vector<std::vector<int>> out;
  for (size_t i = 0; i < batches; ++i) {
    dl.next_batch(in.data(), tg.data());
    for (int b = 0; b < B; ++b) {
      std::vector<int> s(in.begin() + b * T, in.begin() + (b + 1) * T);
      for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(tg[b * T + t], in[b * T + t + 1]) << "targets shift";
      s.push_back(tg[b * T + T - 1]);
      out.push_back(std::move(s));
    }
  }
  return out;
}

}  // namespace

TEST_F(DataTest, NaturalOrderIsTheReferenceSampleList) {
  const int T = 16;
  Fixture fx = make_sources(dir_, T, 5);
  const size_t N = fx.samples.size();  // 62 + 32 + 44 + 44
  ASSERT_EQ(N, 999u / 16 + 516u / 16 + 2 * (710u / 16));
  for (bool prefetch : {false, true}) {
    DataLoader dl(fx.paths, 5, T, kV, 7, /*shuffle=*/false, "data.train", prefetch);
    ASSERT_EQ(dl.num_samples(), N);
    ASSERT_EQ(dl.dataset().num_sources(), 4u);
    EXPECT_STREQ(dl.dataset().source(2).kind(), "megatron");
    EXPECT_STREQ(dl.dataset().source(0).kind(), "llm.c");
    // 2.5 epochs: batches of 5 straddle the epoch boundaries (N = 182 is not a multiple of 5).
    auto got = take(dl, (5 * N / 2) / 5);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], fx.samples[i % N]) << "sample " << i;
    size_t consumed = got.size();
    EXPECT_EQ(dl.position(), (DataLoader::Position{consumed / N, consumed % N}));
  }
}

TEST_F(DataTest, ShuffledEpochsArePermutationsIndependentOfBatchSize) {
  const int T = 16;
  Fixture fx = make_sources(dir_, T, 6);
  const size_t N = fx.samples.size();
  std::map<std::vector<int>, size_t> id_of;
  for (size_t i = 0; i < N; ++i) id_of[fx.samples[i]] = i;
  ASSERT_EQ(id_of.size(), N) << "random samples must be distinct";

  // Sample-id streams over 3 epochs for several batch sizes.
  auto ids_for = [&](int B, uint64_t seed, bool prefetch) {
    DataLoader dl(fx.paths, B, T, kV, seed, true, "data.train", prefetch);
    auto got = take(dl, (3 * N + B - 1) / B);
    std::vector<size_t> ids;
    for (const auto& s : got) {
      auto it = id_of.find(s);
      EXPECT_NE(it, id_of.end()) << "loader produced a sample that is not in the reference";
      ids.push_back(it == id_of.end() ? SIZE_MAX : it->second);
    }
    ids.resize(3 * N);
    return ids;
  };
  auto base = ids_for(1, 42, false);
  for (int e = 0; e < 3; ++e) {
    std::vector<int> seen(N, 0);
    for (size_t i = 0; i < N; ++i) seen[base[e * N + i]]++;
    for (size_t i = 0; i < N; ++i) ASSERT_EQ(seen[i], 1) << "epoch " << e << " sample " << i;
  }
  // Shuffled, and differently per epoch.
  size_t fixed = 0;
  for (size_t i = 0; i < N; ++i) fixed += base[i] == i;
  EXPECT_LT(fixed, N / 4);
  EXPECT_NE(std::vector<size_t>(base.begin(), base.begin() + N),
            std::vector<size_t>(base.begin() + N, base.begin() + 2 * N));
  // Independent of B and of prefetching; a pure function of the seed.
  EXPECT_EQ(ids_for(3, 42, true), base);
  EXPECT_EQ(ids_for(8, 42, false), base);
  EXPECT_EQ(ids_for(17, 42, true), base);
  EXPECT_EQ(ids_for(1, 42, true), base);
  EXPECT_NE(ids_for(1, 43, false), base);
  // sample_at agrees with the stream.
  DataLoader dl(fx.paths, 4, T, kV, 42, true, "data.train", false);
  for (size_t i = 0; i < 3 * N; i += 7) EXPECT_EQ(dl.sample_at(i / N, i % N), base[i]);
}

TEST_F(DataTest, PrefetchEqualsSynchronousAndResumeIsExact) {
  const int T = 16, B = 6;
  Fixture fx = make_sources(dir_, T, 7);
  const size_t N = fx.samples.size();
  DataLoader sync(fx.paths, B, T, kV, 99, true, "data.train", false);
  DataLoader pre(fx.paths, B, T, kV, 99, true, "data.train", true);
  auto a = take(sync, 100), b = take(pre, 100);  // > 3 epochs
  EXPECT_EQ(a, b);
  EXPECT_EQ(sync.position(), pre.position());
  EXPECT_EQ(pre.position(), (DataLoader::Position{600 / N, 600 % N}));

  // Resume: a fresh loader set to the position after k batches continues identically.
  for (size_t k : {0u, 1u, 29u, 30u, 57u}) {
    DataLoader first(fx.paths, B, T, kV, 99, true, "data.train", true);
    take(first, k);
    DataLoader::Position pos = first.position();
    auto cont = take(first, 20);
    DataLoader second(fx.paths, B, T, kV, 99, true, "data.train", true);
    take(second, 3);  // some batches already prefetched/consumed: set_position must discard them
    second.set_position(pos);
    EXPECT_EQ(second.position(), pos);
    EXPECT_EQ(take(second, 20), cont) << "resume after " << k << " batches";
    std::vector<std::vector<int>> want(a.begin() + k * B, a.begin() + (k + 20) * B);
    EXPECT_EQ(cont, want);
  }
  // Rewinding the same loader, repeatedly, mid-stream.
  for (int rep = 0; rep < 5; ++rep) {
    pre.set_position({1, 5});
    auto r = take(pre, 4);
    std::vector<std::vector<int>> want(a.begin() + N + 5, a.begin() + N + 5 + 4 * B);
    EXPECT_EQ(r, want);
  }
  expect_error([&] { pre.set_position({0, N}); }, {"data.train", "an epoch has"});
}

TEST_F(DataTest, DataParallelSlicesTogetherReadTheUnslicedStream) {
  // dp loaders with set_dp_slice(r, dp): step k of rank r is samples [(k*dp + r)*B, (k*dp + r + 1)*B)
  // of the stream one loader without a slice reads, across epoch boundaries and with prefetching.
  const int T = 16, B = 3;
  Fixture fx = make_sources(dir_, T, 8);
  for (int dp : {1, 2, 3}) {
    SCOPED_TRACE("dp=" + std::to_string(dp));
    DataLoader whole(fx.paths, B, T, kV, 5, true, "data.train", false);
    const size_t steps = 2 * fx.samples.size() / (B * dp) + 1;  // > 2 epochs
    auto want = take(whole, steps * dp);
    for (int r = 0; r < dp; ++r) {
      DataLoader slice(fx.paths, B, T, kV, 5, true, "data.train", r % 2 == 0);
      slice.set_dp_slice(r, dp);
      auto got = take(slice, steps);
      for (size_t k = 0; k < steps; ++k)
        for (int b = 0; b < B; ++b)
          ASSERT_EQ(got[k * B + b], want[(k * dp + r) * B + b]) << "rank " << r << " step " << k << " row " << b;
      // Positions are positions in the shared stream.
      EXPECT_EQ(slice.position(), whole.position());
    }
  }
  DataLoader dl(fx.paths, B, T, kV, 5, true, "data.train", false);
  expect_error([&] { dl.set_dp_slice(2, 2); }, {"data.train", "data-parallel slice 2 of 2"});
  expect_error([&] { dl.set_dp_slice(0, 0); }, {"data.train", "data-parallel slice 0 of 0"});
}

TEST_F(DataTest, PathExpansionAndErrors) {
  const int T = 8;
  Rng rng{8};
  fs::create_directories(dir_ / "shards");
  std::vector<std::vector<uint16_t>> toks;
  for (const char* name : {"train_000002.bin", "train_000000.bin", "train_000001.bin", "val_000000.bin"}) {
    toks.push_back(random_tokens(rng, 100));
    ms::write_token_shard((dir_ / "shards" / name).string(), toks.back());
  }
  spit((dir_ / "shards" / "meta.json").string(), "{}");
  // A glob picks train shards sorted by name.
  auto files = ms::expand_data_paths({(dir_ / "shards" / "train_*.bin").string()}, "data.train");
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(fs::path(files[0]).filename(), "train_000000.bin");
  EXPECT_EQ(fs::path(files[2]).filename(), "train_000002.bin");
  // A directory expands to its .bin files (meta.json ignored).
  EXPECT_EQ(ms::expand_data_paths({(dir_ / "shards").string()}, "data.train").size(), 4u);
  // Natural order of the glob = train_000000, train_000001, train_000002.
  DataLoader dl({(dir_ / "shards" / "train_*.bin").string()}, 1, T, kV, 0, false, "data.train");
  auto got = take(dl, 12);
  EXPECT_EQ(got[0], std::vector<int>(toks[1].begin(), toks[1].begin() + T + 1));
  EXPECT_EQ(got[12 - 1], std::vector<int>(toks[1].begin() + 11 * T, toks[1].begin() + 12 * T + 1));
  EXPECT_EQ(take(dl, 1)[0], std::vector<int>(toks[2].begin(), toks[2].begin() + T + 1));

  // A Megatron prefix (with or without .bin, or its .idx), mixed with a shard in one directory.
  fs::create_directories(dir_ / "mixed");
  ms::write_megatron_dataset((dir_ / "mixed" / "corpus").string(), {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}});
  ms::write_token_shard((dir_ / "mixed" / "shard.bin").string(), toks[0]);
  auto mixed = ms::expand_data_paths({(dir_ / "mixed").string()}, "data.train");
  ASSERT_EQ(mixed.size(), 2u);
  ms::TokenDataset ds({(dir_ / "mixed").string()}, kV);
  EXPECT_STREQ(ds.source(0).kind(), "megatron");
  EXPECT_STREQ(ds.source(1).kind(), "llm.c");
  EXPECT_EQ(ds.num_tokens(), 110u);
  EXPECT_EQ(ms::expand_data_paths({(dir_ / "mixed" / "corpus").string()}, "d").size(), 1u);
  EXPECT_EQ(ms::expand_data_paths({(dir_ / "mixed" / "corpus.idx").string()}, "d")[0],
            (dir_ / "mixed" / "corpus.bin").string());
  EXPECT_EQ(ms::expand_data_paths({(dir_ / "mixed" / "*").string()}, "d").size(), 2u);

  // Errors name the setting and the pattern.
  std::string pat = (dir_ / "x*.bin").string();
  expect_error([&] { DataLoader d({pat}, 1, T, kV, 0, true, "data.train"); },
               {"data.train: no files match '" + pat + "'"});
  expect_error([&] { DataLoader d({path("nope.bin")}, 1, T, kV, 0, true, "data.val"); },
               {"data.val: no files match"});
  fs::create_directories(dir_ / "empty");
  expect_error([&] { DataLoader d({(dir_ / "empty").string()}, 1, T, kV, 0, true, "data.train"); },
               {"data.train: no files match"});
  // A non-shard file is named.
  spit(path("notes.bin"), std::string(2000, 'x'));
  expect_error([&] { DataLoader d({path("notes.bin")}, 1, T, kV, 0, true, "data.train"); },
               {path("notes.bin"), "bad magic", "is this an llm.c token shard?"});
  // Too little data for one sample of T+1 tokens.
  ms::write_token_shard(path("tiny.bin"), {1, 2, 3});
  expect_error([&] { DataLoader d({path("tiny.bin")}, 1, T, kV, 0, true, "data.train"); },
               {"data.train", "no sample of T+1 = 9 tokens"});
}
